"""`up --accounting`: slurmdbd and its MariaDB on ctl (config, init SQL, start scripts, the initialised datadir)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from tb_base import run
from tb_layout import TESTBED_LIB, Layout
from tb_nodefs import ids, opaque_dir, put

# `up --accounting`: slurmdbd's database on ctl (MariaDB, datadir in ctl's upper layer), its user and where the
# generated password is kept (the state directory, mode 0600; also in ctl's /etc/slurm/slurmdbd.conf).
ACCOUNTING_DB = "slurm_acct_db"
ACCOUNTING_DB_USER = "slurm"


MARIADB_INIT_SQL = "/etc/mysql/reconciler-testbed-slurmdbd.sql"


# `up --accounting`, on ctl. MariaDB runs as user mysql; its datadir is in ctl's upper layer (/var/lib/mysql is an
# opaque directory there, the host's is hidden). `up` initialises it from the host, through ctl's mounted root,
# while the nodes start (init_mariadb_datadir: mariadb-install-db takes over a second, about as long as
# supervisord waits before it starts its programs), and marks it ready with MARIADB_READY; the init file (run by
# every start, before connections are served) creates slurmdbd's database and user with the testbed's password.
MARIADB_DATADIR = "/var/lib/mysql"
MARIADB_READY = ".reconciler-testbed-initialised"
MARIADB_CNF_PATH = "/etc/mysql/mariadb.conf.d/90-reconciler-testbed.cnf"
MARIADB_START = f"""#!/bin/sh
# mariadbd of testbed node ctl (written by deploy/testbed): wait until `up` has initialised the datadir, then run.
until [ -e {MARIADB_DATADIR}/{MARIADB_READY} ]; do sleep 0.05; done
exec /usr/sbin/mariadbd --init-file={MARIADB_INIT_SQL}
"""

# Small and quick: a test database, not a production one (small buffer pool and redo log, no doublewrite, the
# log flushed once a second). slurmdbd logs `error: Database settings not recommended values:
# innodb_buffer_pool_size innodb_log_file_size` for it at start, harmlessly. Snapshot isolation off: MariaDB 11.6.2 on
# (trixie's and forky's 11.8) turns it on, and slurmdbd 26.05 then logs that it "will cause slurmdbd to fatal when a
# write conflicts with a concurrent transaction" (accounting.shtml 26.05: innodb_snapshot_isolation=OFF); `loose-`
# because bookworm's 10.11 may not know the option.
MARIADB_CNF = """# written by deploy/testbed: MariaDB for the testbed's slurmdbd (test data: fast, not durable)
[mysqld]
skip-name-resolve
bind-address = 127.0.0.1
innodb_buffer_pool_size = 16M
innodb_log_file_size = 16M
innodb_lock_wait_timeout = 900
innodb_flush_log_at_trx_commit = 2
innodb_doublewrite = 0
innodb_autoextend_increment = 8
innodb_log_buffer_size = 2M
loose-innodb_snapshot_isolation = OFF
key_buffer_size = 1M
aria_pagecache_buffer_size = 1M
max_connections = 32
"""


SLURMDBD_START = """#!/bin/sh
# slurmdbd of testbed node ctl (written by deploy/testbed): wait for munged and MariaDB, then run it (as root:
# slurmdbd drops to SlurmUser=slurm itself, as under Debian's systemd unit).
until [ -S /run/munge/munge.socket.2 ] && mariadb-admin ping >/dev/null 2>&1; do sleep 0.1; done
exec /usr/sbin/slurmdbd -D
"""


REGISTER_CLUSTER = """#!/bin/sh
# Run before slurmctld on testbed node ctl (written by deploy/testbed for --accounting): wait for slurmdbd and
# register the cluster in its database (`sacctmgr add cluster` also creates the root account and root's user
# association, so root can run jobs with AccountingStorageEnforce=associations). Nothing to do when slurm.conf
# does not use slurmdbd (e.g. after an apply of a desired state without accounting).
conf=/etc/slurm/slurm.conf
grep -qi '^AccountingStorageType=accounting_storage/slurmdbd' "$conf" || exit 0
name=$(sed -n 's/^ClusterName=//Ip' "$conf" | head -n 1)
until sacctmgr -n -P show cluster format=cluster 2>/dev/null | grep -qix "$name" \\
        || sacctmgr -i add cluster "$name" >/dev/null 2>&1; do
    sleep 0.1
done
"""


def slurmdbd_conf(password: str) -> str:
    """/etc/slurm/slurmdbd.conf of ctl (--accounting): slurmdbd on ctl, MariaDB through its local socket."""
    return ("# slurmdbd.conf written by deploy/testbed (--accounting); owner slurm, mode 0600\n"
            "AuthType=auth/munge\nDbdHost=ctl\nDbdPort=6819\nSlurmUser=slurm\n"
            "StorageType=accounting_storage/mysql\nStorageHost=localhost\n"
            f"StorageUser={ACCOUNTING_DB_USER}\nStoragePass={password}\nStorageLoc={ACCOUNTING_DB}\n"
            "LogFile=/var/log/slurm/slurmdbd.log\nPidFile=/run/slurmdbd.pid\n")


def mariadb_init_sql(password: str) -> str:
    """SQL run by every mariadbd start (--init-file; one statement a line): slurmdbd's database and user."""
    user = f"'{ACCOUNTING_DB_USER}'@'localhost'"
    return (f"CREATE DATABASE IF NOT EXISTS {ACCOUNTING_DB};\n"
            f"CREATE USER IF NOT EXISTS {user} IDENTIFIED BY '{password}';\n"
            f"ALTER USER {user} IDENTIFIED BY '{password}';\n"
            f"GRANT ALL ON {ACCOUNTING_DB}.* TO {user};\n")


def accounting_password(layout: Layout) -> str:
    """slurmdbd's database password: made once per testbed, kept in <state>/slurmdbd.pass (mode 0600)."""
    path = layout.accounting_pass
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        tmp.write_text(os.urandom(12).hex() + "\n")
        os.chmod(tmp, 0o600)
        os.replace(tmp, path)
    return path.read_text().strip()


def install_accounting(upper: Path, password: str) -> None:
    """ctl with --accounting: slurmdbd.conf, MariaDB's config, init SQL and empty datadir, the start scripts."""
    put(upper, "etc/slurm/slurmdbd.conf", slurmdbd_conf(password), 0o600, ids("slurm"))
    mysql = ids("mysql")
    opaque_dir(upper, MARIADB_DATADIR.lstrip("/"), 0o755, mysql)
    put(upper, MARIADB_CNF_PATH.lstrip("/"), MARIADB_CNF)
    put(upper, MARIADB_INIT_SQL.lstrip("/"), mariadb_init_sql(password), 0o600, mysql)
    for name, text in (("mariadb-start", MARIADB_START), ("slurmdbd-start", SLURMDBD_START),
                       ("register-cluster", REGISTER_CLUSTER)):
        put(upper, f"{TESTBED_LIB.lstrip('/')}/{name}", text, 0o755)


def init_mariadb_datadir(layout: Layout) -> None:
    """Initialise ctl's MariaDB datadir from the host, through ctl's mounted root, then mark it ready.

    The bootstrap server runs as root (the state directory is closed to user mysql), so the files are given
    to mysql afterwards; mariadb-start in the node waits for the MARIADB_READY mark.
    """
    root = layout.node_dir("ctl") / "root"
    datadir = root / MARIADB_DATADIR.lstrip("/")
    if (datadir / MARIADB_READY).exists():
        return
    if layout.lower == "/":
        run(["mariadb-install-db", f"--defaults-extra-file={root}{MARIADB_CNF_PATH}", "--user=root",
             f"--datadir={datadir}", "--skip-test-db", "--auth-root-authentication-method=socket",
             "--auth-root-socket-user=root"])
    else:  # the release's own MariaDB, in ctl's root (a private mount namespace gives it /dev and /proc)
        install = shlex.join(["chroot", str(root), "mariadb-install-db", f"--defaults-extra-file={MARIADB_CNF_PATH}",
                              "--user=root", f"--datadir={MARIADB_DATADIR}", "--skip-test-db",
                              "--auth-root-authentication-method=socket", "--auth-root-socket-user=root"])
        run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
             f"mount --rbind /dev {shlex.quote(str(root / 'dev'))} && "
             f"mount -t proc proc {shlex.quote(str(root / 'proc'))} && exec {install}"])
    uid, gid = ids("mysql")
    os.chown(datadir, uid, gid)
    for top, dirs, files in os.walk(datadir):
        for name in [*dirs, *files]:
            os.lchown(os.path.join(top, name), uid, gid)
    put(root, f"{MARIADB_DATADIR.lstrip('/')}/{MARIADB_READY}", "", 0o644, (uid, gid))
