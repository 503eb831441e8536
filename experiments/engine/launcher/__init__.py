"""The parent process: composes the Hydra config, validates every knob before any process
starts, launches torchrun (or the single worker), and records how the job ended."""
