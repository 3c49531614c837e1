"""sentence-transformers' all-MiniLM-L6-v2 written out in numpy: the independent reference the
offline embedder is checked against, in the unit tests and in bench/knowledge_speed.py."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

SENTENCES = [
    "hello world",
    "nginx: [emerg] bind() to 0.0.0.0:80 failed (98: Address already in use)",
    "PostgreSQL was killed and left postmaster.pid behind; the cluster shows down in pg_lsclusters.",
    "redis",
    "A much longer paragraph about a service that keeps crashing because its log partition is full, "
    "which means the operator must rotate or truncate the logs before starting it again, and check inodes too.",
]


def reference_embedding(text: str, weights: dict[str, npt.NDArray[Any]], tokenizer: Tokenizer) -> npt.NDArray[np.float64]:
    """sentence-transformers' all-MiniLM-L6-v2, written out in numpy (float64) from the safetensors weights, one text, no padding."""
    w = {name: array.astype(np.float64) for name, array in weights.items() if array.dtype == np.float32}
    ids = np.array(tokenizer.encode(text).ids)

    def linear(x: npt.NDArray[np.float64], name: str) -> npt.NDArray[np.float64]:
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    def layer_norm(x: npt.NDArray[np.float64], name: str) -> npt.NDArray[np.float64]:
        centered = x - x.mean(axis=-1, keepdims=True)
        return centered / np.sqrt((centered**2).mean(axis=-1, keepdims=True) + 1e-12) * w[f"{name}.weight"] + w[f"{name}.bias"]

    x = w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][: len(ids)]
    x = layer_norm(x + w["embeddings.token_type_embeddings.weight"][0], "embeddings.LayerNorm")
    heads, size = 12, 32
    for layer in range(6):
        prefix = f"encoder.layer.{layer}"
        q, k, v = (
            linear(x, f"{prefix}.attention.self.{name}").reshape(len(ids), heads, size).transpose(1, 0, 2) for name in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(size)
        probabilities = np.exp(scores - scores.max(axis=-1, keepdims=True))
        probabilities /= probabilities.sum(axis=-1, keepdims=True)
        context = (probabilities @ v).transpose(1, 0, 2).reshape(len(ids), heads * size)
        x = layer_norm(linear(context, f"{prefix}.attention.output.dense") + x, f"{prefix}.attention.output.LayerNorm")
        hidden = linear(x, f"{prefix}.intermediate.dense")
        hidden = 0.5 * hidden * (1.0 + np.vectorize(math.erf)(hidden / math.sqrt(2.0)))
        x = layer_norm(linear(hidden, f"{prefix}.output.dense") + x, f"{prefix}.output.LayerNorm")
    pooled = x.mean(axis=0)
    return pooled / np.linalg.norm(pooled)  # type: ignore[no-any-return]
