#include "cli/json_log.h"

#include <spdlog/details/log_msg.h>

#include <chrono>
#include <ctime>
#include <nlohmann/json.hpp>
#include <string>

namespace ecstore::cli {
namespace {

class JsonFormatter : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    using namespace std::chrono;
    const auto since = msg.time.time_since_epoch();
    const std::time_t secs = duration_cast<seconds>(since).count();
    const auto millis = duration_cast<milliseconds>(since).count() % 1000;
    std::tm tm{};
    gmtime_r(&secs, &tm);
    char when[96];
    std::snprintf(when, sizeof(when), "%04d-%02d-%02dT%02d:%02d:%02d.%03lldZ", tm.tm_year + 1900,
                  tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                  static_cast<long long>(millis));
    const auto level = spdlog::level::to_string_view(msg.level);
    std::string line = nlohmann::json{{"time", when},
                                      {"level", std::string(level.data(), level.size())},
                                      {"msg", std::string(msg.payload.data(), msg.payload.size())}}
                           .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    line += '\n';
    dest.append(line.data(), line.data() + line.size());
  }
  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }
};

}  // namespace

std::unique_ptr<spdlog::formatter> JsonLogFormatter() { return std::make_unique<JsonFormatter>(); }

}  // namespace ecstore::cli
