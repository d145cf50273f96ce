"""Desired-state schema of `rollout.slurm_upgrade:`: what runs before slurmdbd moves to another Slurm release.

Imported by reconciler/model/rollout.py for `Rollout.slurm_upgrade`; standard pydantic only. The rules are
reconciler/desired/upgrade_rules.py; the plan's order drivers/slurm_upgrade.py.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from reconciler.model.bounds import duration_between


class SlurmUpgrade(BaseModel):
    """A Slurm upgrade's own steps: the database backup that runs (on the slurmdbd node) before slurmdbd moves."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    backup: str | None = Field(default=None, description="Shell command on the slurmdbd node that backs up the "
                               "accounting database, e.g. `mysqldump --single-transaction slurm_acct_db > "
                               "/var/backups/slurm_acct_db.sql`; required before slurmdbd changes release (it "
                               "converts the database), run once per such upgrade; a non-zero exit stops it")

    state_backup_dir: str = Field(default="/var/backups/slurmctld-state", pattern=r"^/[^\x00\n'\"$`\\]{0,4095}$",
                                  description="Directory on each controller where slurmctld's StateSaveLocation is "
                                  "archived (tar.gz, named by the releases and the time) while slurmctld is stopped, "
                                  "before it moves to another Slurm release (Slurm's upgrade guide)")
    convert_timeout: duration_between(60, 7 * 86400) = Field(  # type: ignore[valid-type]
        default="1h", description="How long the upgraded slurmdbd may take to convert the database and answer")
    daemon_timeout: duration_between(10, 86400) = Field(  # type: ignore[valid-type]
        default="10m", description="How long an upgraded slurmctld or slurmd may take to answer at its new version")

    @field_validator("backup")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        if value is not None and (not value.strip() or "\x00" in value or len(value) > 4096):
            raise ValueError("backup is a non-empty shell command (at most 4,096 characters)")
        return value
