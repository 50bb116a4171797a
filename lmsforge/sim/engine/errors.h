#pragma once

// Error codes as the real runtime reports them: the thread's last error, the
// names and strings, and the loud end of everything the simulator does not
// model.

#include "status.h"

#include <string>

namespace lms_sim {

const char* error_name(Status status);
const char* error_string(Status status);

// Remembers a failure as the calling thread's last error and returns `status`.
Status record(Status status);
// cudaGetLastError / cudaPeekAtLastError (without the sticky error).
Status take_last_error();
Status peek_last_error();

// Every exported function either works or ends here, naming itself: a
// simulator that silently returned success would prove nothing.
[[noreturn]] void not_simulated(const char* function, const std::string& detail = "");

// Diagnostics that a real GPU would not print but that make a failure
// readable (faults, invalidated captures).
void report(const std::string& message);

} // namespace lms_sim
