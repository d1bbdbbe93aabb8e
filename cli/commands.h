// The `ec-store` command line: inspects, fills and evicts a store directory, or a running
// server's store (--server); runs the daemon (serve).
// Thread rules: single-threaded; each command owns the Store or Client it opens.
#pragma once

namespace ecstore::cli {

int Run(int argc, char** argv);

}  // namespace ecstore::cli
