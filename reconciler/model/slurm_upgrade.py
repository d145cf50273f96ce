"""Desired-state schema of `rollout.slurm_upgrade:`: what runs before slurmdbd moves to another Slurm release.

Imported by reconciler/model/rollout.py for `Rollout.slurm_upgrade`; standard pydantic only. The rules are
reconciler/desired/upgrade_rules.py; the plan's order drivers/slurm_upgrade.py.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator


class SlurmUpgrade(BaseModel):
    """A Slurm upgrade's own steps: the database backup that runs (on the slurmdbd node) before slurmdbd moves."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    backup: str | None = Field(default=None, description="Shell command on the slurmdbd node that backs up the "
                               "accounting database, e.g. `mysqldump --single-transaction slurm_acct_db > "
                               "/var/backups/slurm_acct_db.sql`; required before slurmdbd changes release (it "
                               "converts the database), run once per such upgrade; a non-zero exit stops it")

    @field_validator("backup")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\x00" in value or len(value) > 4096):
            raise ValueError("backup is a non-empty shell command (at most 4,096 characters)")
        return value
