from regatta_gateway.readmodels.projection import ReadModels

__all__ = ["ReadModels"]
