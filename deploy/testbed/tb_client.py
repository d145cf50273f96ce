"""The client files of a testbed: ssh_config and known_hosts on the host (and, light, in the nodes)."""

from __future__ import annotations

from tb_layout import Layout


def client_file_binds(layout: Layout) -> dict[str, str]:
    """Light nodes: host file -> path in the node (the host's path) of ssh_config, known_hosts and key.

    Inside a node the ssh_config is the node variant (no ProxyCommand: nodes reach each other on the
    bridge), so the inventory's ssh options work unchanged on a node that relays to others, e.g. a
    ClusterShell gateway.
    """
    return {str(layout.state / "node-ssh_config"): str(layout.ssh_config),
            str(layout.known_hosts): str(layout.known_hosts), str(layout.identity): str(layout.identity)}


def write_client_files(layout: Layout, host_keys: list[str]) -> None:
    """known_hosts and ssh_config for reaching the nodes from the host (and, light, from the nodes)."""
    layout.known_hosts.write_text("".join(host_keys))
    layout.ssh_config.write_text(ssh_config(layout, proxy=True))
    if layout.light:
        (layout.state / "node-ssh_config").write_text(ssh_config(layout, proxy=False))


def ssh_config(layout: Layout, proxy: bool) -> str:
    """ssh_config with one Host entry per node; PROXY: through the admin namespace (the host's variant)."""
    proxy_line = f"    ProxyCommand nsenter --net=/run/netns/{layout.admin_ns} nc %h %p\n" if proxy else ""
    entries = [f"# ssh_config of testbed {layout.name} (written by deploy/testbed)\n"]
    for node in layout.nodes:
        entries.append(f"""Host {node}
    HostName {layout.ip(node)}
    User root
    IdentityFile {layout.identity}
    IdentitiesOnly yes
    UserKnownHostsFile {layout.known_hosts}
    GlobalKnownHostsFile /dev/null
    StrictHostKeyChecking yes
{proxy_line}    LogLevel ERROR
""")
    return "\n".join(entries)
