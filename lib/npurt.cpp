// The separately compiled runtime, its core: every non-template body of impl/src_core.hpp's files,
// once. lib/ compiles the runtime in parts that build side by side; impl/src.hpp is the one-file way.
#if !defined(NPURT_SEPARATE_COMPILATION)
#error "lib/ is the separately compiled runtime: define NPURT_SEPARATE_COMPILATION"
#endif
#define NPURT_BUILDING_LIBRARY 1
#define NPURT_LIBRARY_PART 1

#include <npurt/impl/src_core.hpp>
