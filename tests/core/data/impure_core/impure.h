// Fixture for the include check: this file must be rejected.
#include <spdlog/spdlog.h>
