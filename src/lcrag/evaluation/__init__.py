from lcrag.evaluation.metrics import contains_answer, normalize_answer, qa_f1_score

__all__ = ["contains_answer", "normalize_answer", "qa_f1_score"]
