"""Where a process sits in a job: torchrun's variables and Slurm's read in one place. Two srun
tasks (Slurm's environment set by hand, on loopback) measuring and recording as torchrun's
ranks do: tests/parbench/launch/test_torchrun.py, where they resume the job two torchrun nodes
started (test_two_srun_tasks_on_loopback_measure_and_record_as_one_job)."""

import pytest

from parbench.machine.cluster import Job, first_host, job, slurm_stop_reason

TORCHRUN = {"TORCHELASTIC_RUN_ID": "x", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1",
            "GROUP_RANK": "1", "MASTER_ADDR": "node1", "MASTER_PORT": "29500",
            "TORCHELASTIC_RESTART_COUNT": "2"}
SLURM = {"SLURM_PROCID": "3", "SLURM_NTASKS": "4", "SLURM_LOCALID": "1", "SLURM_NODEID": "1",
         "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_ID": "123456", "SLURM_STEP_ID": "0"}
# A batch script's own step, as sbatch starts it (rank 0 of the job's tasks, but no step).
BATCH_SCRIPT = {"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
                "SLURM_NODEID": "0", "SLURM_JOB_NODELIST": "vm", "SLURM_JOB_ID": "12"}


def test_a_process_on_its_own_is_in_no_job():
    assert job({}) is None
    assert job({**SLURM, "SLURM_NTASKS": "1"}) is None  # one task: on its own
    # parbench run in an sbatch script, not under srun: on its own, not rank 0 of 2 waiting
    assert job(BATCH_SCRIPT) is None


def test_torchrun_s_variables_make_a_job():
    assert job(TORCHRUN) == Job("torchrun", 3, 4, 1, 1, "node1", 29500, restart=2, job_id="x")


def test_srun_s_variables_make_a_job_meeting_at_the_first_node():
    # Every task derives the same port from the job's id where MASTER_PORT is not set.
    assert job(SLURM) == Job("slurm", 3, 4, 1, 1, "gpu07", 15000 + 123456 % 17000,
                             job_id="123456.0")
    assert job(SLURM).describe() == "slurm job 123456.0, 4 ranks"
    assert job({**TORCHRUN, "TORCHELASTIC_RUN_ID": "none"}).describe() == "torchrun job, 4 ranks"
    assert job({**SLURM, "MASTER_ADDR": "head", "MASTER_PORT": "1234"}).master_addr == "head"
    assert job({**SLURM, **TORCHRUN}).started_by == "torchrun"  # torchrun inside an allocation


@pytest.mark.parametrize("nodelist, host", [("node01", "node01"), ("node[07-09,12]", "node07"),
                                            ("a[3],b[1-2]", "a3"), ("gpu1,gpu2", "gpu1")])
def test_the_first_host_of_a_node_list(nodelist, host):
    assert first_host(nodelist) == host


# What `scontrol show job` said as SIGTERM arrived, on the CI cluster (tests/slurm, where the
# real signals are sent): a time limit, scancel, and a SIGTERM Slurm did not send.
@pytest.mark.parametrize("fields, sender", [
    ({"JobState": "COMPLETING", "Reason": "TimeLimit", "TimeLimit": "00:01:00"},
     "Slurm at job 123456's time limit (00:01:00)"),
    ({"JobState": "COMPLETING", "Reason": "None"},
     "Slurm: job 123456 ending (scancel, or its batch script exited first)"),
    ({"JobState": "CANCELLED", "Reason": "None"}, "Slurm: job 123456 cancelled (scancel)"),
    ({"JobState": "PREEMPTED", "Reason": "None"}, "Slurm: job 123456 preempted (reason None)"),
    ({"JobState": "RUNNING", "Reason": "None"}, None),
    ({}, None)])  # scontrol missing or not answering
def test_why_slurm_stopped_the_job(fields, sender):
    asked = []
    assert slurm_stop_reason(SLURM, lambda job_id: asked.append(job_id) or fields) == sender
    assert asked == ["123456"]


def test_outside_slurm_nobody_is_asked():
    assert slurm_stop_reason({}, lambda job_id: pytest.fail("asked")) is None
