"""Provider adapters. Each module is imported lazily when a model of its API is built."""
