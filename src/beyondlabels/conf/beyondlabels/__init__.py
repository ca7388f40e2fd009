"""The namespace of the configs under ``pkg://beyondlabels.conf`` (:mod:`beyondlabels.conf`)."""
