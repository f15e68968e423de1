"""Evals: run an agent over a dataset of cases, score each run, repeat trials.

A :class:`Case` is an input plus what to check; a :class:`Dataset` is a list of cases
(from code or a JSON file). :func:`run_evals` runs every case ``trials`` times, at most
``concurrency`` at a time, each run on a fresh agent from your factory, and scores it
with the evaluators. With ``results_path`` each finished trial is appended to a JSONL
file as it finishes, and a rerun with the same file skips the trials already there
(resume after a crash).
"""

from ._atif import ATIF_VERSION
from ._atif import to_atif
from ._dataset import Case
from ._dataset import Dataset
from ._evaluators import Evaluator
from ._evaluators import ExactMatch
from ._evaluators import LatencyBudget
from ._evaluators import LLMJudge
from ._evaluators import Score
from ._evaluators import ToolTrajectory
from ._evaluators import TurnsBudget
from ._evaluators import TypedOutput
from ._evaluators import evaluators_of
from ._replay import Call
from ._replay import Divergence
from ._replay import ReplayReport
from ._replay import load_session
from ._replay import replay
from ._report import Change
from ._report import compare
from ._report import to_html
from ._run import CaseResult
from ._run import EvalReport
from ._run import pass_at_k
from ._run import pass_hat_k
from ._run import run_evals
from ._specs import BudgetSpec
from ._specs import EvaluatorSpec
from ._specs import ExactMatchSpec
from ._specs import JudgeSpec
from ._specs import LatencySpec
from ._specs import ToolTrajectorySpec

__all__ = [
    "ATIF_VERSION",
    "BudgetSpec",
    "Call",
    "Case",
    "CaseResult",
    "Change",
    "Dataset",
    "Divergence",
    "EvalReport",
    "Evaluator",
    "EvaluatorSpec",
    "ExactMatch",
    "ExactMatchSpec",
    "JudgeSpec",
    "LLMJudge",
    "LatencyBudget",
    "LatencySpec",
    "ReplayReport",
    "Score",
    "ToolTrajectory",
    "ToolTrajectorySpec",
    "TurnsBudget",
    "TypedOutput",
    "compare",
    "evaluators_of",
    "load_session",
    "pass_at_k",
    "pass_hat_k",
    "replay",
    "run_evals",
    "to_atif",
    "to_html",
]
