// The one assertion macro of the native C++ tests: counts failures instead of aborting, so a
// run reports every failed check.  One counter for every test file of native_tests.
#pragma once
#include <cstdio>

namespace elastico_test {
inline int failures = 0;
}

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            ++elastico_test::failures;                                                    \
        }                                                                                 \
    } while (0)
