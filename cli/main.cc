#include "cli/commands.h"

int main(int argc, char** argv) { return ecstore::cli::Run(argc, argv); }
