// allocations.hpp — counts the test binary's allocations (operator new is
// replaced in test/test_steady_state.cpp), on every thread, between begin()
// and end(). One count at a time.
#pragma once

namespace allocation_count {
void begin();  // starts counting from zero
long end();    // stops counting; returns how many allocations there were
}  // namespace allocation_count
