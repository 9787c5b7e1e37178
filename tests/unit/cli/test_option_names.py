"""Issue 29, item 6: a bad value of `sloth add` is reported under the option
the user typed, and the names come from the one declaration (commands.py,
``Option.field``): a new option of `add`, or a new job field, cannot be
left out of them (submit.option_names)."""

from __future__ import annotations

import pytest

from sloth_daemon.checks import FIELDS, LIMIT_NAMES, RULE_NAMES
from sloth_daemon.cli.commands import COMMANDS
from sloth_daemon.cli.submit import NOTHING, check, option_names
from sloth_daemon.errors import BadRequest

ADD = next(c for c in COMMANDS if c.path == ("add",))
# The options of `add` that set no job field of their own, and why.
SET_NO_FIELD = {
    "stdin": "where the commands come from",
    "from_file": "where the commands come from",
    "wait": "what the client does after",
    "no_start": "what the client does before",
    "as_json": "how the ids are printed",
    "anywhere": "sets place to '*', always valid: a bad place is --on's",
    "batch": "names the batch (the commit's handle), not a job",
}
# Set as a whole from options of their own (--mem, --cpus, --nice, --io name each limit; --stall,
# --fail-on, --retry-on, --no-retry-on, --backoff each rule).
SET_BY_PARTS = {"limits", "rules"}


def test_every_option_of_add_declares_the_job_field_it_sets():
    unset = {o.dest for o in ADD.options if o.field is None}
    assert unset == set(SET_NO_FIELD), "declare the option's field= in commands.py, or say here why it sets none"


def test_every_job_field_has_the_name_a_user_of_add_typed():
    names = option_names()
    missing = (set(FIELDS) - SET_BY_PARTS | set(LIMIT_NAMES) | set(RULE_NAMES)) - set(names)
    assert not missing
    assert names["lease_s"] == "--lease" and names["not_before"] == "--delay/--at" and names["place"] == "--on"
    assert names["retry_exit"] == "--retry-exit"  # the hand-kept list had missed it


def test_every_field_an_option_declares_is_one_the_queue_checks():
    declared = {o.field for c in COMMANDS for o in c.options if o.field is not None}
    assert declared <= set(FIELDS) | set(LIMIT_NAMES) | set(RULE_NAMES)


@pytest.mark.parametrize("field, value, said", [
    ("lease_s", 0.0001, "--lease must be at least"),
    ("slots", 0, "--slots must be at least 1"),
    ("priority", "x", "--priority must be an integer"),
])
def test_a_bad_value_is_reported_under_the_option_as_typed(field, value, said):
    with pytest.raises(BadRequest) as e:
        check([{"command": ["true"]}], {field: value}, where=lambda i: "")
    assert e.value.message.startswith(said) and e.value.message.endswith(NOTHING)
