"""The configuration file (``kind: ExtenderConfiguration``): schema, loading, validation."""

from extender.config.model import ConfigError, ExtenderConfig, load_config, parse_config

__all__ = ["ConfigError", "ExtenderConfig", "load_config", "parse_config"]
