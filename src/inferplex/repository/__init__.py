"""The model repository: finding models on disk and preparing them for loading."""
