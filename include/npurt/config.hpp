// npurt/config.hpp — version, and the header-only / separate-compilation switch.
//
// Header-only by default: every non-template body in impl/*.ipp is `inline` and included at the
// bottom of its header. Define NPURT_SEPARATE_COMPILATION (Meson option header_only=false does
// it) to declare them non-inline and link the bodies from lib/ instead — Asio's scheme.
#pragma once

#define NPURT_VERSION_MAJOR 0
#define NPURT_VERSION_MINOR 1
#define NPURT_VERSION_PATCH 0
#define NPURT_VERSION (NPURT_VERSION_MAJOR * 10000 + NPURT_VERSION_MINOR * 100 + NPURT_VERSION_PATCH)

#if defined(NPURT_SEPARATE_COMPILATION)
#define NPURT_HEADER_ONLY 0
#define NPURT_DECL
#else
#define NPURT_HEADER_ONLY 1
#define NPURT_DECL inline
#endif

// In the compiled library itself, bodies are emitted exactly once by impl/src.hpp, or by lib/'s
// parts (NPURT_LIBRARY_PART): each includes the impl/*.ipp files it compiles and nothing pulls in
// the others, so the parts compile side by side.
// A function of the launch path that a header-only build inlines into its callers: left to the
// inliner, the decision would move with the size of the whole program (GCC's unit-growth limit),
// and a launch's cost with it. The separately compiled library defines it as any other.
#if NPURT_HEADER_ONLY
#define NPURT_HOT_DECL [[gnu::always_inline]] inline
#else
#define NPURT_HOT_DECL
#endif

#if NPURT_HEADER_ONLY || (defined(NPURT_BUILDING_LIBRARY) && !defined(NPURT_LIBRARY_PART))
#define NPURT_INCLUDE_IMPL 1
#else
#define NPURT_INCLUDE_IMPL 0
#endif

// 1 when compiled with AddressSanitizer (GCC defines __SANITIZE_ADDRESS__, clang has the
// feature test): internal record caches then hand memory straight to the global heap, so that
// ASan sees every use after free.
#if defined(__SANITIZE_ADDRESS__)
#define NPURT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NPURT_ASAN 1
#endif
#endif
#ifndef NPURT_ASAN
#define NPURT_ASAN 0
#endif
