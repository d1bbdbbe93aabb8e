#include "base/units.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <utility>

namespace ecstore {

namespace {
// A plain decimal ("12", "1.5") at the start of text: no sign, exponent, hex, inf or nan, so
// nothing like 1e300 or 0x10 is read as a number. Returns how many characters it took.
size_t ParseDecimal(const std::string& text, double* v) {
  size_t pos = 0, digits = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos, ++digits;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])))
      ++pos, ++digits;
  }
  if (digits == 0 || digits > 30) return 0;
  *v = std::strtod(text.substr(0, pos).c_str(), nullptr);
  return pos;
}
}  // namespace

Result<uint64_t> ParseSize(const std::string& text) {
  double v = 0;
  size_t pos = ParseDecimal(text, &v);
  std::string unit = text.substr(pos);
  std::transform(unit.begin(), unit.end(), unit.begin(), ::tolower);
  static const std::pair<const char*, double> kUnits[] = {
      {"", 1},          {"b", 1},
      {"k", 1024.0},    {"kb", 1e3},
      {"kib", 1024.0},  {"m", 1 << 20},
      {"mb", 1e6},      {"mib", 1 << 20},
      {"g", 1 << 30},   {"gb", 1e9},
      {"gib", 1 << 30}, {"t", 1099511627776.0},
      {"tb", 1e12},     {"tib", 1099511627776.0}};
  const bool letters_only = std::all_of(
      unit.begin(), unit.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
  if (pos == 0 || !letters_only)
    return Status::InvalidArgument("bad size '" + text +
                                   "'; write a plain decimal number and a unit: 256MiB, 4GiB, "
                                   "1.5GiB or bytes");
  for (auto& [name, mult] : kUnits) {
    if (unit != name) continue;
    constexpr double kMax = 1ull << 60;  // 1 EiB: far past any pool or disk
    if (v * mult > kMax)
      return Status::InvalidArgument("size '" + text + "' is out of range (at most 1EiB)");
    return static_cast<uint64_t>(v * mult);
  }
  return Status::InvalidArgument(
      "unknown size unit in '" + text +
      "'; use B, KiB, MiB, GiB, TiB (binary: 1KiB = 1024 B; K, M, G and T "
      "are the same) or KB, MB, GB, TB (decimal: 1KB = 1000 B)");
}

Result<uint64_t> ParseDuration(const std::string& text) {
  double v = 0;
  size_t pos = ParseDecimal(text, &v);
  std::string unit = text.substr(pos);
  double mult = 0;
  if (unit == "ms")
    mult = 1e-3;
  else if (unit == "s" || unit.empty())
    mult = 1;
  else if (unit == "m")
    mult = 60;
  else if (unit == "h")
    mult = 3600;
  else if (unit == "d")
    mult = 86400;
  if (pos == 0 || mult == 0)
    return Status::InvalidArgument("bad duration '" + text +
                                   "'; write it as 250ms, 90s, 15m, 2h or 7d");
  constexpr double kMaxSeconds = 100.0 * 365 * 86400;
  if (v * mult > kMaxSeconds)
    return Status::InvalidArgument("duration '" + text + "' is out of range (at most 100 years)");
  return static_cast<uint64_t>(v * mult * 1e6);
}

}  // namespace ecstore
