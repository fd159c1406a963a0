// Anchor translation unit of the simulator library.
#include <npurt/backend.hpp>
