// The module's functions that need no Cache: host_buffer, parse_size, parse_transport.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <string>

#include "base/host_buffer.h"
#include "base/units.h"
#include "net/transport_choice.h"
#include "python/src/entries.h"

namespace nb = nanobind;
using namespace nb::literals;

namespace ecstore::py {

void BindUtilities(nb::module_& m) {
  m.def(
      "host_buffer",
      [](size_t nbytes) {
        auto* hb = new ecstore::HostBuffer(Check(ecstore::HostBuffer::Allocate(nbytes)));
        nb::capsule owner(hb,
                          [](void* p) noexcept { delete static_cast<ecstore::HostBuffer*>(p); });
        return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(hb->data(), {hb->size()}, owner);
      },
      "nbytes"_a,
      "a writable uint8 array of pinned memory in huge pages where there are any, faulted in "
      "(base/host_buffer.h); freed with the array");
  m.def(
      "parse_size", [](const std::string& text) { return Check(ParseSize(text)); }, "text"_a,
      "bytes from '256MiB', '4GiB', '1.5G' or '4096' (the CLI's parser, base/units.h)");
  m.def(
      "parse_transport",
      [](const std::string& t) {
        return net::TransportKindName(Check(net::ParseTransportKind(t)));
      },
      "name"_a, "the transport's name, checked as connect checks it (net/transport_choice.h)");
}

}  // namespace ecstore::py
