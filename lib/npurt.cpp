// The separately compiled runtime: every non-template body, once.
#include <npurt/impl/src.hpp>
