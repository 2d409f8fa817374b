"""GPU kernels by name and by category, and the launch statistics of a step.

Categories come from one ordered table of regular expressions over the kernel's full name, first match wins
(`KERNEL_RULES`); a user puts their own rules in front of it (`probe analyze --kernel-category CAT=REGEX`, compiled
by probe.analysis.ledger.patterns for RE2). The rules were written against the kernel names of every real trace in
tests/data and ../shared/traces (public and peer: cuBLAS / cuBLASLt `sm90_xmma_gemm`, `nvjet`; CUTLASS; cuDNN;
FlashAttention; FlashInfer; Triton and triton_kernels; hipBLASLt `Cijk_`; `ck_tile`; aiter; TensorRT-LLM; vLLM and
SGLang custom kernels; fbgemm; NCCL), and tests/test_kernel_names.py checks every one of those names against a
category assigned by hand (tests/data/kernel_categories.json). memcpy and memset are their own GPU op kinds, so
they need no rule.

Why the order matters: a KV-cache write named `reshape_and_cache_flash_kernel` must not fall to attention's
`flash`; a fused `add_rmsnorm_quant` is a norm before it is a quantization; an expert GEMM (`_matmul_ogs_*`,
`fused_moe_kernel`, a grouped GEMM) is MoE before it is a GEMM; cuDNN's `implicit_gemm` convolutions are
convolutions, not GEMMs; and an argmax is a `reduce_kernel` that samples.

Every rule has a bounded match width (no `*`, `+` or `{m,}`; tests/test_kernel_names.py checks it with
patterns.max_width), so classifying a name costs time linear in its length, whatever the trace holds: the old
`flashinfer.*(prefill|decode)` made one 80k-character kernel name take 15.7 s (quadratic backtracking).

The names people read are `short_name`s (no return type, template or parameter list, the way nsys and TraceLens
print them); every table and the JSON keep the full name beside it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from probe.analysis.intervals import grouped_medians, merged_by_group
from probe.analysis.ledger.patterns import Pattern, compile_user, not_utf8
from probe.counts import DIGITS, count
from probe.errors import ProbeError

GEMM, ATTENTION, NORM, ELEMENTWISE, ROTARY = "gemm", "attention", "norm", "elementwise", "rotary"
KV_CACHE, REDUCTION, SAMPLING, COMMUNICATION = "kv_cache", "reduction", "sampling", "communication"
MEMCPY, MEMSET, MOE, CONV, QUANTIZE, OTHER = "memcpy", "memset", "moe", "conv", "quantize", "other"
CATEGORIES = (
    GEMM,
    ATTENTION,
    NORM,
    ELEMENTWISE,
    ROTARY,
    KV_CACHE,
    REDUCTION,
    SAMPLING,
    COMMUNICATION,
    MOE,
    CONV,
    QUANTIZE,
    MEMCPY,
    MEMSET,
    OTHER,
)

# (category, pattern), first match wins. Patterns are case-insensitive unless they say (?-i:...), and of bounded
# width (see the module docstring).
KERNEL_RULES: tuple[tuple[str, str], ...] = (
    # NCCL / RCCL collectives, torch symmetric-memory and custom all-reduce kernels, and expert-parallel dispatch and
    # combine across GPUs (DeepEP's `deep_ep::intranode::dispatch`, DeepSeek's `dpsk::ep::internode::combine`)
    (
        COMMUNICATION,
        r"nccl|rccl|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|multimem|custom_ar|"
        r"cross_device_reduce|quick_?reduce|mscclpp|(?:inter|intra)node::",
    ),
    # writing new keys and values into the cache, and the page/index bookkeeping of paged caches
    (
        KV_CACHE,
        r"reshape_and_cache|concat_and_cache|store_kvcache|append_paged_kv_cache|kv_cache_update|"
        r"kv_indices|page_indices|write_to_kv",
    ),
    # FlashInfer's (Batch|Single)(Prefill|Decode)...Kernel, and the attention kernels of the others
    (
        ATTENTION,
        r"fmha|flash_?attn|flash_fwd|flash_bwd|flash_?decod|attn_fwd|attention|mha_|\bmla_|"
        r"xformers|(batch|single)_?(prefill|decode)|paged_?attn",
    ),
    (ROTARY, r"rotary|\brope\b|rope_|apply_rope"),
    # torch's group norm computes its statistics in RowwiseMoments; its layer norm backward is GammaBetaBackward
    (
        NORM,
        r"rms_?norm|layer_?norm|group_?norm|batch_?norm|instance_?norm|\bbn_(fw|bw)|norm_kernel|l2_?norm|"
        r"rowwise_?moments|gamma_?beta_?backward",
    ),
    # routing, permutes and expert GEMMs: triton_kernels' _matmul_ogs_* (gpt-oss on vLLM), fused_moe_kernel (vLLM,
    # SGLang), grouped GEMMs (CUTLASS GroupProblemShape, DeepGEMM's MGrouped*, torch's _grouped_mm), aiter's fmoe,
    # TensorRT-LLM's moe::dev:: and its trtllm-gen batched GEMMs (`bmm_..._dynBatch`, inside vllm::moe_forward on B200)
    (
        MOE,
        r"\bmoe|_moe|moe_|routing|expert|_finalize_matmul_scatter|bitmatrix|_topk_forward|matmul_ogs|"
        r"group(ed)?_?(gemm|mm)|groupproblemshape|mgrouped|fmoe|dynbatch",
    ),
    (QUANTIZE, r"quant|qparam|hfp8|fp8rowwise"),  # fbgemm's fp8 conversions: _float_to_hfp8, _FP8rowwise_to_float
    # convolutions (cuDNN and its helpers) before GEMM: their implicit GEMMs are convolutions
    (
        CONV,
        r"conv|fprop|dgrad|wgrad|scudnn|winograd|fft2d|implicit_gemm|cask_cudnn|nchwToNhwc|nhwcToNchw|"
        r"im2col|cudnn::cnn|cudnn::ops|cutlass_cudnn",
    ),
    # fbgemm_gpu is a library, most of whose kernels are no GEMM
    (GEMM, r"(?<!fb)gemm|gemv|matmul|(?-i:Cijk_)|nvjet|\bbmm_|cublas|hipblaslt|splitKreduce"),
    (SAMPLING, r"argmax|argmin|top_?k|top_?p|sampling|sampler|multinomial|gumbel|exponential_"),
    # fbgemm's permute_pooled_embs moves pooled rows, it pools nothing
    (REDUCTION, r"softmax|reduce|cumsum|\bscan|segment|pool(?!ed_emb)|norm_?stats|welford"),
    (
        ELEMENTWISE,
        r"elementwise|triton_poi|act_and_mul|silu|gelu|relu|swiglu|CatArray|copy_kernel|fill|"
        r"index|gather|scatter|masked|dropout|multi_tensor_apply|distribution|arange|pad|clamp|"
        r"where|position|token_ids|cast|convert|transpose|permute|embedding",
    ),
)
SHORT_KERNEL_NS = 5_000  # a kernel under 5 us does less work than its launch costs the host


@dataclass(frozen=True)
class KernelRules:
    """A compiled rule table: user rules first (RE2, through patterns.compile_user), then KERNEL_RULES."""

    rules: tuple[tuple[str, re.Pattern | Pattern], ...]

    @classmethod
    def build(cls, extra: tuple[tuple[str, str], ...] = ()) -> KernelRules:
        user = tuple((c, compile_user(p, f"--kernel-category {c}={p}", ignore_case=True)) for c, p in extra)
        return cls((*user, *_BUILTIN))

    def category(self, name: str) -> str:
        for category, pattern in self.rules:
            if pattern.search(name):
                return category
        return OTHER


_BUILTIN = tuple((category, re.compile(pattern, re.IGNORECASE)) for category, pattern in KERNEL_RULES)
DEFAULT_RULES = KernelRules.build()


def parse_category_rule(text: str) -> tuple[str, str]:
    """`CATEGORY=REGEX` from the command line; the category may be new or one of CATEGORIES."""
    category, sep, pattern = text.partition("=")
    if not sep or not category.strip() or not pattern:
        raise ProbeError(f"--kernel-category {text!r}: use CATEGORY=REGEX")
    if why := not_utf8(category):
        raise ProbeError(f"--kernel-category {text!r}: the category is {why}")
    return category.strip(), pattern


@dataclass(frozen=True)
class KernelStat:
    """One GPU op name over a scope (a step, or the whole trace). Times in integer ns; `_us` twins below."""

    name: str  # the full name as the trace writes it
    short_name: str  # short_name(name): what a person reads (tables, charts)
    category: str
    count: int
    total_ns: int
    mean_ns: float
    p50_ns: float
    max_ns: int
    share_of_busy: float  # total / the scope's GPU busy time (kernels on parallel streams can sum past 1)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "short_name": self.short_name,
            "category": self.category,
            "count": self.count,
            "total_us": self.total_ns / 1e3,
            "mean_us": self.mean_ns / 1e3,
            "p50_us": self.p50_ns / 1e3,
            "max_us": self.max_ns / 1e3,
            "share_of_busy": self.share_of_busy,
        }


def kernel_stats(
    group: np.ndarray,
    name_id: np.ndarray,
    dur_ns: np.ndarray,
    groups: int,
    names: tuple[str, ...],
    categories: np.ndarray,
    busy_ns: np.ndarray,
    keep: int | None = None,
) -> list[list[KernelStat]]:
    """Per group (a step; or one group for the whole trace): every op name's statistics, largest total first,
    at most `keep` of them. `categories[name_id]` is each name's category; `busy_ns[g]` the group's busy time."""
    out: list[list[KernelStat]] = [[] for _ in range(groups)]
    sel = group >= 0
    if not sel.any():
        return out
    width = len(names)
    key = group[sel].astype(np.int64) * width + name_id[sel]
    dur = dur_ns[sel]
    uniq, inverse, counts = np.unique(key, return_inverse=True, return_counts=True)
    totals = np.bincount(inverse, weights=dur, minlength=len(uniq)).astype(np.int64)
    maxima = np.full(len(uniq), np.iinfo(np.int64).min, np.int64)
    np.maximum.at(maxima, inverse, dur)
    _, medians = grouped_medians(key, dur)
    short: dict[int, str] = {}  # once a name, however many groups it is in
    for k, n, total, p50, top in zip(
        uniq.tolist(), counts.tolist(), totals.tolist(), medians.tolist(), maxima.tolist(), strict=True
    ):
        g, name = divmod(k, width)
        busy = int(busy_ns[g])
        if name not in short:
            short[name] = short_name(names[name])
        share = total / busy if busy else 0.0
        out[g].append(KernelStat(names[name], short[name], str(categories[name]), n, total, total / n, p50, top, share))
    for g in range(groups):
        out[g].sort(key=lambda s: (-s.total_ns, s.name))
        if keep is not None:
            out[g] = out[g][:keep]
    return out


def category_totals(
    group: np.ndarray, category_of_op: np.ndarray, dur_ns: np.ndarray, groups: int
) -> list[dict[str, int]]:
    """Per group: total GPU-op time by category (ns), categories in CATEGORIES order, then any user ones."""
    sel = group >= 0
    names, category = np.unique(category_of_op[sel].astype(str), return_inverse=True)
    width = max(len(names), 1)
    key = group[sel].astype(np.int64) * width + category
    totals = np.bincount(key, weights=dur_ns[sel], minlength=groups * width).astype(np.int64).reshape(groups, width)
    counts = np.bincount(key, minlength=groups * width).reshape(groups, width)
    return _by_category(names, totals, counts > 0)


@dataclass(frozen=True)
class CategoryOverlap:
    """Per group (a step), each category's GPU time read against the others', ns (the two dicts are one a group):
    `busy`, the union of its ops (how long one of them ran: at most the group's busy, however many streams run
    them); `alone`, the part of that no op of another category ran in: the group's busy less the union of every
    other category's ops, which is what the GPU's busy time loses when the category's ops take no time and the
    others keep theirs. Kernels on parallel streams (communication under compute) make `alone` far less than the
    summed time of `category_totals`."""

    busy: list[dict[str, int]]
    alone: list[dict[str, int]]


def category_overlap(
    group: np.ndarray, category_of_op: np.ndarray, start: np.ndarray, end: np.ndarray, groups: int
) -> CategoryOverlap:
    """`CategoryOverlap` of every group at once (rows with group < 0 are left out): each (group, category)'s ops
    merged, then one sweep over the merged intervals' ends in (group, time) order counts the categories running;
    where exactly one runs, the running sum of the open categories' ids is that one's id. O(n log n), whatever the
    number of groups or categories."""
    sel = group >= 0
    names, category = np.unique(category_of_op[sel].astype(str), return_inverse=True)
    width = max(len(names), 1)
    key = group[sel].astype(np.int64) * width + category
    k, s, e = merged_by_group(key, start[sel], end[sel])
    busy = np.bincount(k, weights=e - s, minlength=groups * width).astype(np.int64)
    g, c = k // width, k % width
    times, opened = np.concatenate((s, e)), np.concatenate((np.ones(len(s), np.int64), -np.ones(len(e), np.int64)))
    order = np.lexsort((times, np.concatenate((g, g))))
    times, opened, owner, at = times[order], opened[order], np.concatenate((c, c))[order], np.concatenate((g, g))[order]
    running = np.cumsum(opened)  # categories running after each event
    who = np.cumsum(opened * owner)  # the sum of their ids: the id itself where one runs
    one = (running[:-1] == 1) & (at[1:] == at[:-1])  # the stretch to the next event of the same group
    alone = np.bincount(
        at[:-1][one] * width + who[:-1][one], weights=(times[1:] - times[:-1])[one], minlength=groups * width
    ).astype(np.int64)
    ran = np.bincount(key, minlength=groups * width).reshape(groups, width) > 0
    return CategoryOverlap(
        _by_category(names, busy.reshape(groups, width), ran), _by_category(names, alone.reshape(groups, width), ran)
    )


def _by_category(names: np.ndarray, values: np.ndarray, present: np.ndarray) -> list[dict[str, int]]:
    """Per group (a row of `values`), category -> value for the categories present in it, in CATEGORIES order,
    then any user ones by name."""
    order = {c: i for i, c in enumerate(CATEGORIES)}
    ranked = sorted(range(len(names)), key=lambda i: (order.get(str(names[i]), len(order)), str(names[i])))
    return [{str(names[i]): int(values[g, i]) for i in ranked if present[g, i]} for g in range(len(values))]


_MANGLED_PART = re.compile(f"({DIGITS})")


def _demangled_base(name: str) -> str | None:
    """The qualified name of an Itanium-mangled symbol, less its template and parameter lists:
    `_ZN7ck_tile6kentryILi1E...` -> `ck_tile::kentry`. Only the name's own prefix is read (source names, `St` for
    std); None if it is not one."""
    rest = name[2:]
    nested = rest.startswith("N")
    rest = rest[1:] if nested else rest
    parts = []
    if rest.startswith("St"):
        parts.append("std")
        rest = rest[2:]
    while rest:
        m = _MANGLED_PART.match(rest)
        if not m:
            break
        length = count(m.group(1))
        start = m.end()
        if not length or start + length > len(rest):
            break
        parts.append(rest[start : start + length])
        rest = rest[start + length :]
        if not nested:
            break
    return "::".join(parts) if parts else None


# Wrappers whose own name says nothing: the kernel is their first template argument (`cutlass::Kernel<...gemm...>`).
_GENERIC_WRAPPERS = frozenset({"Kernel", "Kernel2", "device_kernel", "kernel"})


def _first_template_argument(text: str) -> str:
    depth = 0
    for j, c in enumerate(text):
        depth += (c in "<({") - (c in ">)}")
        if c == "," and depth == 0:
            return text[:j].strip()
    return text.strip()


def short_name(name: str) -> str:
    """A kernel's name the way nsys and TraceLens print it for people: no return type, template arguments or
    parameter list. `void at::native::elementwise_kernel<128, 4, ...>(int, ...)` -> `at::native::elementwise_kernel`;
    a mangled `_ZN5aiter24add_rmsnorm_quant_kernelI...` -> `aiter::add_rmsnorm_quant_kernel`; a SFINAE return type
    is a return type (`std::enable_if<((8)>(0)), void>::type vllm::fused_add_rms_norm_kernel<...>(...)` ->
    `vllm::fused_add_rms_norm_kernel`); a generic wrapper keeps
    its first template argument (`cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x64_16x4_nn_align1>`). Names that
    are not C++ signatures (`Memcpy DtoD (Device -> Device)`, `Cijk_...`, Triton's `triton_poi_fused_...`) come back
    unchanged. Traces cut long names, so an unclosed bracket ends the name where it opens."""
    if name.startswith("_Z"):
        return _demangled_base(name) or name
    out: list[str] = []
    template = ""  # the last template argument list dropped, for the generic wrappers
    signature = False
    i, n = 0, len(name)
    while i < n:
        c = name[i]
        after_name = bool(out) and (out[-1].isalnum() or out[-1] in "_>]:")
        if c == "<" and after_name:
            depth, parens, j = 1, 0, i + 1
            while j < n and depth:  # a `>` inside parentheses is a comparison: enable_if<((8)>(0)), void>
                parens += (name[j] == "(") - (name[j] == ")")
                depth += ((name[j] == "<") - (name[j] == ">")) * (parens == 0)
                j += 1
            template, signature, i = name[i + 1 : j - 1], True, j
            continue
        if c == "(" and after_name and out[-1] != ":":
            signature = True
            break  # the parameter list: what follows is parameters and qualifiers
        out.append(c)
        i += 1
    if not signature:
        return name
    text = "".join(out).strip()
    depth, cut = 0, 0  # the return type and specifiers: the words before the last one outside parentheses
    for j, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if c == " " and depth == 0:
            cut = j + 1
    base = text[cut:] or name
    if base.rsplit("::", 1)[-1] in _GENERIC_WRAPPERS and template:
        base = f"{base}<{short_name(_first_template_argument(template))}>"
    return base
