"""``python -m agentgym.serve.vllm_main ARGS``: vLLM's OpenAI server, run as vLLM runs it
(``python -m vllm.entrypoints.openai.api_server ARGS``), minus one kind of noise.

torchao's wheels carry CUDA-only kernels; on the CPU build of torch every process that
imports torchao (vLLM's server and each of its engine processes) logged "Failed to load
.../_C_mxfp8...so: Could not load this library" for each of them, for nothing: agentgym
and vLLM use none of them on a CPU. A filter on torchao's logger drops exactly those
records where torch has no CUDA; every other torchao message stays. The filter is set at
this module's top level, so that processes vLLM spawns (which import this module again as
``__mp_main__``) get it too.
"""

from __future__ import annotations

import logging
import runpy

#: the module vLLM's OpenAI-compatible server runs as
VLLM_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


class _NoCudaKernelNoise(logging.Filter):
    """Drop torchao's "Failed to load <kernel>.so" records on a torch without CUDA."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if not (message.startswith("Failed to load") and ".so" in message):
            return True
        import torch

        return torch.version.cuda is not None  # a CUDA torch: the failure means something


logging.getLogger("torchao").addFilter(_NoCudaKernelNoise())

if __name__ == "__main__":
    # alter_sys=False keeps this module as __main__, so spawned processes import it again
    runpy.run_module(VLLM_SERVER_MODULE, run_name="__main__", alter_sys=False)
