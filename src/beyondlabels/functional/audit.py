"""The label audit under its former module name, kept importable: the definitions are
:mod:`beyondlabels.functional.label_audit` (named apart from the ranking audit of the metrics)."""

from __future__ import annotations

from beyondlabels.functional.label_audit import (
    DUPLICATE_THRESHOLD,
    OUTLIER_THRESHOLD,
    QUALITY_THRESHOLD,
    AuditSettings,
    LabelAudit,
    audit_label_shares,
    audit_neighbors,
    join_neighbors,
    suspect_overlap,
)

__all__ = ["AuditSettings", "LabelAudit", "audit_label_shares", "audit_neighbors", "join_neighbors", "suspect_overlap"]
__all__ += ["DUPLICATE_THRESHOLD", "OUTLIER_THRESHOLD", "QUALITY_THRESHOLD"]
