from .projection import ReadModels

__all__ = ["ReadModels"]
