"""A linear judge over hashed word n-grams and rule scores: microseconds on a CPU.

A judge is a logistic regression: a bias, one weight per hashed feature id (see
`analysis.features`) and one per named rule score. Its file is JSON: what it reads, how it
was trained and how it scored out-of-sample, and its weights (float32, zlib, base64), so a
judge is a few hundred kilobytes, versioned, and readable without the training stack.
"""

from __future__ import annotations

import base64
import json
import math
import zlib
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from otel_safety.analysis.features import FeatureSpec, feature_ids
from otel_safety.analysis.sentences import sentence_spans

__all__ = ["LinearJudge", "load_judge"]


@dataclass(eq=False)  # compared (and memoised) by identity
class LinearJudge:
    name: str
    version: str
    specs: tuple[FeatureSpec, ...]
    bias: float
    # float32, one per hashed id, shared by every field (ids are prefixed); empty, with no
    # specs, for a judge of the rule scores alone
    weights: array
    rule_weights: dict[str, float]
    card: dict[str, Any] = field(default_factory=dict)

    def margin(self, fields: Mapping[str, str], rules: Mapping[str, float]) -> float:
        weights = self.weights
        total = self.bias
        for spec in self.specs:
            total += sum(weights[i] for i in feature_ids(fields.get(spec.field), spec))
        total += sum(w * rules.get(name, 0.0) for name, w in self.rule_weights.items())
        return total

    def probability(self, fields: Mapping[str, str], rules: Mapping[str, float]) -> float:
        margin = self.margin(fields, rules)
        return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, margin))))

    def strongest_sentence(self, field_name: str, text: str, sign: float = 1.0) -> str:
        """The sentence of `text` whose words push the verdict furthest towards `sign`
        (+1: towards the positive class): the evidence a reader can check."""
        spec = next((s for s in self.specs if s.field == field_name), None)
        if spec is None or not text:
            return text[:240] if text else ""
        best, best_weight = "", -math.inf
        for start, end in sentence_spans(text[: spec.head])[:40]:
            sentence = text[start:end]
            weight = sign * sum(self.weights[i] for i in feature_ids(sentence, spec))
            if weight > best_weight:
                best, best_weight = sentence, weight
        return best

    def to_json(self) -> str:
        packed = base64.b64encode(zlib.compress(self.weights.tobytes(), 9)).decode()
        return json.dumps(
            {
                "name": self.name,
                "version": self.version,
                "specs": [s.__dict__ for s in self.specs],
                "bias": self.bias,
                "rule_weights": self.rule_weights,
                "card": self.card,
                "weights": packed,
            },
            indent=1,
        )


def load_judge(path: Path) -> LinearJudge:
    document = json.loads(path.read_text(encoding="utf-8"))
    weights = array("f")
    weights.frombytes(zlib.decompress(base64.b64decode(document["weights"])))
    specs = tuple(FeatureSpec(**spec) for spec in document["specs"])
    size = specs[0].size if specs else 0  # a judge of rule scores alone reads no words
    if len(weights) != size:
        raise ValueError(f"{path}: {len(weights)} weights for a {size}-id space")
    return LinearJudge(
        name=document["name"],
        version=document["version"],
        specs=specs,
        bias=float(document["bias"]),
        weights=weights,
        rule_weights={k: float(v) for k, v in document["rule_weights"].items()},
        card=document.get("card", {}),
    )
