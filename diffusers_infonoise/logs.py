"""The package's loggers (standard :mod:`logging` loggers under ``diffusers_infonoise``): their INFO lines come from the
main process only, as diffusers' scripts log through accelerate's main-process logger (a line repeated once per rank
says nothing more); warnings and errors come from every rank, since they may differ between ranks."""

from __future__ import annotations

import logging
import os

__all__ = ["get_logger", "process_rank"]


def process_rank() -> int:
    """The global rank of this process: ``torch.distributed``'s once a process group exists, else the ``RANK`` that
    ``torchrun`` and ``accelerate launch`` set (0 when neither does)."""
    import torch

    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    try:
        return int(os.environ.get("RANK", "0"))
    except ValueError:
        return 0


class _MainProcessInfo(logging.Filter):
    """Keeps records below WARNING on global rank 0 only."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or process_rank() == 0


_MAIN_PROCESS_INFO = _MainProcessInfo()


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with INFO and below kept on the main process only (module docstring); the
    handlers and levels stay the application's (the scripts configure them as diffusers' do)."""
    logger = logging.getLogger(name)
    if _MAIN_PROCESS_INFO not in logger.filters:
        logger.addFilter(_MAIN_PROCESS_INFO)
    return logger
