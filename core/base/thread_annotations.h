// Clang's thread-safety annotations (-Wthread-safety): which mutex guards a member, which a
// function needs held, which it takes. Under other compilers they expand to nothing, so they
// document the locking rule everywhere and are checked, as errors, in every clang build
// (cmake/SiestaCompileOptions.cmake): in CI, the fuzz preset of scripts/test, which compiles
// every library.
#pragma once

#if defined(__clang__)
#define SIESTA_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define SIESTA_THREAD_ANNOTATION(x)
#endif

#define SIESTA_CAPABILITY(name) SIESTA_THREAD_ANNOTATION(capability(name))
#define SIESTA_SCOPED_CAPABILITY SIESTA_THREAD_ANNOTATION(scoped_lockable)
#define SIESTA_GUARDED_BY(mu) SIESTA_THREAD_ANNOTATION(guarded_by(mu))
#define SIESTA_PT_GUARDED_BY(mu) SIESTA_THREAD_ANNOTATION(pt_guarded_by(mu))
#define SIESTA_REQUIRES(...) SIESTA_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define SIESTA_EXCLUDES(...) SIESTA_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define SIESTA_ACQUIRE(...) SIESTA_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define SIESTA_RELEASE(...) SIESTA_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define SIESTA_RETURN_CAPABILITY(x) SIESTA_THREAD_ANNOTATION(lock_returned(x))
#define SIESTA_NO_THREAD_SAFETY_ANALYSIS SIESTA_THREAD_ANNOTATION(no_thread_safety_analysis)
