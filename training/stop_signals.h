// SIGTERM and SIGUSR1 (what Slurm sends before a time limit or preemption) set a
// flag instead of ending the process; the trainer polls stop_signal() at each step
// boundary, writes a checkpoint and returns (`trainrt train` exits 0).
//
//   install_stop_signals();
//   if (int sig = stop_signal()) std::printf("%s\n", signal_name(sig));
#pragma once

namespace trainrt {

void install_stop_signals();
int stop_signal();                 // 0 = no signal yet, else its number
const char* signal_name(int sig);  // "SIGTERM", "SIGUSR1"

}  // namespace trainrt
