"""Topic names and the "topic:partition" sources the offset guards key on: built and taken apart only here."""

from __future__ import annotations

REPORTS_PREFIX = "ldp.reports."
RAW_PREFIX = "ldp.raw."  # a shuffled collection's reports as the edge admitted them: only the shuffler reads them
SHUFFLER_STATE_TOPIC = "ldp.shuffler.state"  # compacted, keyed by collection: the shuffler's closed windows
SPECS_TOPIC = "ldp.collections"  # the default; `Settings.specs_topic` (LDP_SPECS_TOPIC) names another
STRATEGIES_TOPIC = "ldp.strategies"
DLQ_TOPIC = "ldp.dlq"
SETASIDE_TOPIC = "ldp.setaside"  # reports a poisoning audit set aside, kept with the detector's reason
GRADIENTS_TOPIC = "ldp.sgd.gradients"  # devices' noisy gradients for the SGD coordinator
MODELS_TOPIC = "ldp.sgd.models"  # compacted, keyed by job id
JOBS_PREFIX = "ldp.jobs."  # training jobs devices join (`ldpstream.runtime.jobs`)
JOBS_TOPIC = "ldp.jobs.specs"  # compacted, keyed by "job/JOB@VERSION": the signed job specs
UPDATES_TOPIC = "ldp.jobs.updates"  # the updates the edge admitted, keyed by device pseudonym
JOBS_RAW_PREFIX = "ldp.jobs.raw."  # a shuffled job's updates as the edge admitted them, no key: the shuffler's input
SHUFFLED_UPDATES_TOPIC = "ldp.jobs.shuffled"  # shuffled jobs' updates the shuffler released, no key


def job_raw_topic(job_id: str) -> str:
    """The topic the edge writes a shuffled job's updates to, for the shuffler: ldp.jobs.raw.<job>.

    Examples
    --------
    >>> job_raw_topic("fashion")
    'ldp.jobs.raw.fashion'
    """
    return f"{JOBS_RAW_PREFIX}{job_id}"


def report_topic(collection: str) -> str:
    """The topic of a collection's reports: ldp.reports.<collection>.

    Examples
    --------
    >>> report_topic("diagnostics")
    'ldp.reports.diagnostics'
    """
    return f"{REPORTS_PREFIX}{collection}"


def raw_topic(collection: str) -> str:
    """The topic the edge writes a shuffled collection's reports to, for the shuffler: ldp.raw.<collection>.

    Examples
    --------
    >>> raw_topic("diagnostics")
    'ldp.raw.diagnostics'
    """
    return f"{RAW_PREFIX}{collection}"


def raw_collection(topic: str) -> str:
    """The collection whose raw reports a raw topic carries (ValueError for any other topic)."""
    if not topic.startswith(RAW_PREFIX) or len(topic) == len(RAW_PREFIX):
        raise ValueError(f"{topic!r} is not a raw topic ({RAW_PREFIX}<collection>)")
    return topic[len(RAW_PREFIX):]


def is_report_topic(topic: str) -> bool:
    """True for ldp.reports.<collection>."""
    return topic.startswith(REPORTS_PREFIX) and len(topic) > len(REPORTS_PREFIX)


def collection_of(topic: str) -> str:
    """The collection whose reports a report topic carries (ValueError for any other topic).

    Examples
    --------
    >>> collection_of("ldp.reports.diagnostics")
    'diagnostics'
    """
    if not is_report_topic(topic):
        raise ValueError(f"{topic!r} is not a report topic ({REPORTS_PREFIX}<collection>)")
    return topic[len(REPORTS_PREFIX):]


def source(topic: str, partition: int) -> str:
    """The name an offset guard gives one partition of a topic: "topic:partition".

    Examples
    --------
    >>> source("ldp.reports.x", 3), source_partition("ldp.reports.x:3")
    ('ldp.reports.x:3', 3)
    """
    return f"{topic}:{partition}"


def source_partition(name: str) -> int:
    """The partition of a "topic:partition" source."""
    return int(name.rpartition(":")[2])


def source_topic(name: str) -> str:
    """The topic of a "topic:partition" source."""
    return name.rpartition(":")[0]
