"""Replaying a learner's WebGPU host program (JavaScript) on the server.

- shim.js: the WebGPU compute API in JavaScript; records calls with their program line.
- js.py: the QuickJS context; runs the program turn by turn under the deadline.
- gpu.py: the device timeline; replays the recorded calls on wgpu-py and stops at the
  first error WebGPU would report, with its line.
- encoder.py: command encoders, and which of an encoder's calls failed.
- trace.py: what ran, as bounded JSON (buffers, writes, bind groups, passes, readbacks).
- program.py: run_program, program_outcome and replay_program, the entry points.
"""
