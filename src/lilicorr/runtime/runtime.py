"""Target runtime: any local Hugging Face causal LM, batched, with a KV cache that tolerates holes.

Speculative decoding appends a block of drafted tokens to every sequence, then keeps a different
number of them per sequence. Rather than re-layout the cache after every step, each cache column
has a per-row *valid* flag: rejected tokens and padding become holes that the attention mask hides
and RoPE positions skip. New tokens are always appended at the right end, so HF's own cache
``update`` and causal mask stay correct; ``compact`` squeezes the holes out when they pile up.

DFlash convention for taps: layer id ``i`` is the *output* of decoder layer ``i``, i.e. HF
``hidden_states[i + 1]`` (for the last layer HF returns the final-normed state there).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from lilicorr.runtime import cache_edits
from lilicorr.runtime.arch import attention_layout, drafter_support, layer_masks, live_positions
from lilicorr.runtime.attention import use_grouped_sdpa
from lilicorr.runtime.cache import CacheState
from lilicorr.runtime.folder import TargetError, check_folder, eos_ids
from lilicorr.runtime.int4_linear import use_int4_weights
from lilicorr.runtime.packed_linear import pack_linears
from lilicorr.runtime.threads import head_on_pass_threads, step_threads


def resolve_device(device: str) -> str:
    """``auto``: CUDA when torch sees one, else the CPU; ``cuda`` without one is a named error."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise TargetError(f"device {device!r}: expected auto, cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise TargetError("device 'cuda': no CUDA device is available to torch here")
    return device


@dataclass
class TargetOutput:
    logits: torch.Tensor  # [batch, new, vocab] fp32
    taps: torch.Tensor | None  # [batch, new, len(layer_ids) * hidden] (model dtype), None without taps


class TargetRuntime:
    """A frozen causal LM with batched cached forwards and hidden-state taps.

    ``device``: where the model and its KV cache live. The decoding engine's bookkeeping (ids, masks,
    lengths) and the drafter stay on the CPU; inputs move to the device at each forward and logits
    and taps come back, so one engine serves both. On a GPU the target — the cost of verification
    and of data generation — runs there; serving drafters at GPU scale is vLLM's and SGLang's job.
    """

    def __init__(
        self,
        model: nn.Module,
        tokenizer,
        layer_ids: tuple[int, ...] = (),
        path: Path | None = None,
        device: str = "cpu",
    ):
        self.device = torch.device(device)
        self.model = model.to(self.device).eval()
        use_grouped_sdpa(self.model)  # grouped K/V without transformers' per-step copy (runtime/attention.py)
        self.int4_layers = 0
        if self.device.type == "cpu":
            pack_linears(self.model)  # weights laid out for oneDNN once, not at every call (runtime/packed_linear.py)
            # a folder dequantized from a 4-bit GGUF: one-token steps on those 4-bit weights (runtime/int4_linear.py)
            self.int4_layers = use_int4_weights(self.model, path)
            head = self.model.get_output_embeddings()
            if head is not None:  # a one-thread pass's LM head runs on the threads it set aside (runtime/threads.py)
                head_on_pass_threads(head)
        self._host: dict[str, nn.Module] = {}
        self.tokenizer = tokenizer
        self.path = path
        self.num_layers = model.config.num_hidden_layers
        self.hidden_size = model.config.hidden_size
        self.vocab_size = model.config.vocab_size
        # transformers' models take the positions whose logits they compute (prefill needs only the last)
        self._keeps_logits = "logits_to_keep" in inspect.signature(self.model.forward).parameters
        self.layout = attention_layout(model.config)  # sliding windows: the runtime masks them (runtime/arch.py)
        self._supported = False  # drafter_support checked (once, when a drafter attaches)
        self.set_layer_ids(layer_ids)

    @classmethod
    def load(
        cls,
        path: str | Path,
        layer_ids: tuple[int, ...] = (),
        dtype: torch.dtype = torch.float32,
        device: str = "cpu",
    ) -> TargetRuntime:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        path = Path(path)
        check_folder(path)
        try:
            tokenizer = AutoTokenizer.from_pretrained(path)
        except Exception as e:  # noqa: BLE001 - re-raised with the folder named
            raise TargetError(f"target {path}: tokenizer failed to load: {e}") from e
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
        return cls(model, tokenizer, layer_ids, path, device=resolve_device(device))

    def set_layer_ids(self, layer_ids: tuple[int, ...]) -> None:
        bad = [i for i in layer_ids if not 0 <= i < self.num_layers]
        if bad:
            raise TargetError(
                f"target_layer_ids {list(layer_ids)}: {bad} out of range for a target with "
                f"{self.num_layers} layers (valid: 0..{self.num_layers - 1})"
            )
        self.layer_ids = tuple(layer_ids)
        if self.layer_ids:
            self.require_drafter_support()

    def require_drafter_support(self) -> None:
        """Refuse, naming the missing feature, a target a drafter cannot share its embedding, LM head and
        cache with (``runtime.arch.drafter_support``): when a drafter attaches, not steps later."""
        if self._supported:
            return
        problems = drafter_support(self.model)
        if problems:
            name = type(self.model).__name__
            raise TargetError(f"target {self.path or name} ({name}): no drafter can run on it: " + "; ".join(problems))
        self._supported = True

    # -- pieces a drafter shares with the target ------------------------------------------------
    @property
    def embed_tokens(self) -> nn.Embedding:
        """The target's embedding *table* as a plain lookup, on the CPU where the drafter runs (the table is
        shared on the CPU, copied to the host otherwise). Unscaled on purpose: vLLM's DFlash and LiLiCorr
        drafters embed block tokens and lattice candidates through the target's ``embed_tokens`` table, and
        vLLM applies Gemma's √hidden normalizer outside it (transformers applies it inside the module), so a
        drafter fed the module's output here would see ≈ 25× larger inputs than in vLLM. For targets without
        an embedding scale the two are the same (docs/guide/targets.md)."""
        self.require_drafter_support()
        if "embed" not in self._host:
            table = self.model.get_input_embeddings().weight.detach()  # [V, H]
            self._host["embed"] = nn.Embedding.from_pretrained(table.cpu(), freeze=True)
        return self._host["embed"]

    @property
    def lm_head(self) -> nn.Module:
        """The target's LM head, on the CPU where the drafter runs (a host copy off-CPU)."""
        self.require_drafter_support()
        if self.device.type == "cpu":
            return self.model.get_output_embeddings()
        if "head" not in self._host:
            src = self.model.get_output_embeddings()
            head = nn.Linear(src.in_features, src.out_features, bias=src.bias is not None)
            head.load_state_dict({k: v.detach().cpu() for k, v in src.state_dict().items()})
            self._host["head"] = head.to(src.weight.dtype).eval()
            pack_linears(self._host["head"])  # the drafter's head on the CPU, packed as a CPU target's is
        return self._host["head"]

    def _out(self, out, want_taps: bool) -> TargetOutput:
        """Logits (fp32) and taps of a forward, back on the CPU."""
        taps = None
        if self.layer_ids and want_taps:
            taps = torch.cat([out.hidden_states[i + 1] for i in self.layer_ids], dim=-1).cpu()
        return TargetOutput(logits=out.logits.float().cpu(), taps=taps)

    @property
    def eos_token_ids(self) -> set[int]:
        return eos_ids(self.model.generation_config, self.model.config, self.tokenizer)

    # -- cache ------------------------------------------------------------------------------------
    def new_state(self, batch_size: int) -> CacheState:
        from lilicorr.runtime.kv_layer import runtime_cache  # imports transformers: only when decoding

        return CacheState(
            cache=runtime_cache(self.model.config),  # appends in place; windows kept whole, masked by the runtime
            valid=torch.zeros(batch_size, 0, dtype=torch.bool),
            lengths=torch.zeros(batch_size, dtype=torch.long),
        )

    @torch.no_grad()
    def forward_tree(
        self,
        state: CacheState,
        tokens: torch.Tensor,
        depth: torch.Tensor,
        ancestors: torch.Tensor,
        want_taps: bool = True,
    ) -> TargetOutput:
        """Append a token tree per row and score every node in one pass (tree verification).

        tokens / depth ``[batch, N]`` (node 0 is the root, at the row's next position);
        ancestors ``[batch, N, N]`` bool, ``[i, j]`` = node j is node i or one of its ancestors.
        Each node sees the row's live cache and its own ancestors only. All N columns are appended
        as live; ``keep_new`` then keeps the accepted path and turns the rest into holes.
        """
        b, n = tokens.shape
        past = state.valid[:, None, :].expand(b, n, state.valid.shape[1])
        visible = torch.cat([past, ancestors], dim=2)  # [batch, N, past + N]
        positions = state.lengths[:, None] + depth  # [batch, N]
        key_pos = torch.cat([live_positions(state.valid), positions], dim=1)  # [batch, past + N]
        mask = layer_masks(self.layout, visible, positions, key_pos, self.model.dtype)
        out = self._model_pass(state, tokens, mask, positions, want_taps)
        state.valid = torch.cat([state.valid, torch.ones(b, n, dtype=torch.bool)], dim=1)
        state.lengths = state.lengths + n
        return self._out(out, want_taps)

    def _model_pass(
        self,
        state: CacheState,
        ids: torch.Tensor,
        mask: torch.Tensor,
        positions: torch.Tensor,
        want_taps: bool,
        logits_at: torch.Tensor | None = None,
    ):
        """The one call into the HF model, for ``forward`` and ``forward_tree``: appends ``ids [batch, n]`` to
        ``state.cache``; on one thread when the pass is small (``runtime/threads.py``); logits at ``logits_at``
        only, when given."""
        dev = self.device
        keep = {"logits_to_keep": logits_at.to(dev)} if logits_at is not None and self._keeps_logits else {}
        with step_threads(*ids.shape):
            out = self.model(
                input_ids=ids.to(dev),
                attention_mask=_to(mask, dev),
                position_ids=positions.to(dev),
                past_key_values=state.cache,
                use_cache=True,
                output_hidden_states=bool(self.layer_ids) and want_taps,
                **keep,
            )
        if logits_at is not None and not self._keeps_logits:
            out.logits = out.logits[:, logits_at.to(dev)]
        return out

    def keep_new(self, state: CacheState, keep: torch.Tensor) -> None:
        """Of the last ``keep.shape[1]`` columns keep only those marked (an accepted tree path; ``cache_edits``)."""
        cache_edits.keep_path(state, keep, self.device)

    @torch.no_grad()
    def forward(
        self,
        state: CacheState,
        input_ids: torch.Tensor,
        new_mask: torch.Tensor | None = None,
        want_taps: bool = True,
        logits_at: torch.Tensor | None = None,
    ) -> TargetOutput:
        """Append ``input_ids`` ``[batch, n]`` to every row and return logits (and taps) for them.

        ``new_mask`` ``[batch, n]`` marks real tokens; each row's real tokens must come first, the
        rest is padding that becomes a hole. Outputs at padding positions are meaningless.
        ``logits_at`` (sorted indices into the n new columns): logits only there, ``[batch, len, V]`` — a
        prefill needs each row's last position only, and full-vocabulary logits of every prompt position
        cost more than the rest of the forward for long prompts (1024 tokens × 32 rows: 6 GB in fp32).
        """
        b, n = input_ids.shape
        if b != state.batch_size:
            raise TargetError(f"input batch {b} != cache batch {state.batch_size}")
        if new_mask is None:
            new_mask = torch.ones(b, n, dtype=torch.bool)
        positions = state.lengths[:, None] + torch.arange(n)[None, :]  # [batch, n]
        # Every new column is visible to HF: causality hides a row's trailing pads from its real
        # tokens, and a pad seeing itself keeps its activations finite (a fully masked query
        # row would produce NaN that then leaks through 0 * NaN into later layers).
        attn = torch.cat([state.valid, torch.ones(b, n, dtype=torch.bool)], dim=1).long()
        win = self.layout.window
        if win is not None and attn.shape[1] > win:  # some key may lie outside a window: the runtime's masks
            causal = torch.ones(n, n, dtype=torch.bool).tril().expand(b, n, n)
            visible = torch.cat([state.valid[:, None, :].expand(b, n, state.valid.shape[1]), causal], dim=2)
            key_pos = torch.cat([live_positions(state.valid), positions], dim=1)  # [batch, past + n]
            attn = layer_masks(self.layout, visible, positions, key_pos, self.model.dtype)
        out = self._model_pass(state, input_ids, attn, positions, want_taps, logits_at)
        state.valid = torch.cat([state.valid, new_mask], dim=1)
        state.lengths = state.lengths + new_mask.sum(1)
        return self._out(out, want_taps)

    # Edits after a step (runtime/cache_edits.py): the cache's columns and the rows' live flags move together.
    def truncate(self, state: CacheState, keep: torch.Tensor) -> None:
        """Keep only the first ``keep[b]`` live tokens of each row (drop rejected drafts)."""
        cache_edits.truncate(state, keep, self.device)

    def compact(self, state: CacheState) -> None:
        """Squeeze holes out: live tokens of each row packed to the right, in order."""
        cache_edits.compact(state, self.device)

    def select_rows(self, state: CacheState, rows: torch.Tensor) -> None:
        """Keep only the given batch rows (a finished request leaves the batch)."""
        cache_edits.select_rows(state, rows, self.device)

    def concat_states(self, a: CacheState, b: CacheState) -> CacheState:
        """Stack two batches (requests joining a running batch); the shorter is left-padded with holes."""
        return cache_edits.concat_states(a, b, self.new_state(a.batch_size + b.batch_size))


def _to(mask, device):
    """A mask, or a dict of masks per layer type, on ``device``."""
    return {k: v.to(device) for k, v in mask.items()} if isinstance(mask, dict) else mask.to(device)
