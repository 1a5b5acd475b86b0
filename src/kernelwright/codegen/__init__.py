"""Code generation: the WGSL expression emitter and the kernel source it assembles."""
