"""Pure statistics of Regatta: pass@k, Wilson intervals, the exact paired test, Holm, ranks.

No I/O and no framework imports: the normative description is docs/statistics.md.
"""

from .intervals import Z_975, Score, pass_at_k_score, score, wilson
from .multiple import ALPHA, HolmResult, holm
from .paired import paired_permutation_test, pairwise_p_values, summarize_differences, summarize_pair
from .passk import pass_at_1, pass_at_k, pass_at_k_curve, pass_at_k_task, per_task_pass_at_k
from .ranking import (
    Participant,
    RankedParticipant,
    TopComparison,
    rank_lower_is_better,
    rank_participants,
    tied_flags,
)
from .signflip import NORMAL_APPROXIMATION_THRESHOLD, NullSummary, lower_tail_count, p_value, p_values

__all__ = [
    "ALPHA",
    "NORMAL_APPROXIMATION_THRESHOLD",
    "Z_975",
    "HolmResult",
    "NullSummary",
    "Participant",
    "RankedParticipant",
    "Score",
    "TopComparison",
    "holm",
    "lower_tail_count",
    "p_value",
    "p_values",
    "paired_permutation_test",
    "pairwise_p_values",
    "pass_at_1",
    "pass_at_k",
    "pass_at_k_curve",
    "pass_at_k_score",
    "pass_at_k_task",
    "per_task_pass_at_k",
    "rank_lower_is_better",
    "rank_participants",
    "score",
    "summarize_differences",
    "summarize_pair",
    "tied_flags",
    "wilson",
]
