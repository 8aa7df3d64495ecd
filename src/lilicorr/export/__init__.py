"""Exports for deployment paths other than vLLM/SGLang folders (GGUF for llama.cpp)."""
