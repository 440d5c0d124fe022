#!/usr/bin/env bash
# Install trainee's systemd user units (used by `make install-systemd`).
#
#   systemd/install.sh [TRAINEE_EXECUTABLE]
#
# TRAINEE_EXECUTABLE defaults to `command -v trainee`. It is made absolute (symlinks
# are kept, so an upgrade behind ~/.local/bin/trainee keeps working) and written into
# ExecStart of trainee.service in place of the template's %h/.local/bin/trainee.
# Both units are then copied to ${XDG_CONFIG_HOME:-~/.config}/systemd/user.
# It never calls systemctl: it prints the command that enables the socket.
set -euo pipefail

readonly TEMPLATE_EXEC='ExecStart=%h/.local/bin/trainee'
here="$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)"

die() {
    printf 'install.sh: %s\n' "$*" >&2
    exit 2
}

exe="${1:-}"
if [[ -z "$exe" ]]; then
    exe="$(command -v trainee || true)"
    [[ -n "$exe" ]] || die "no trainee executable on PATH; pass its path as the first argument"
fi
[[ -e "$exe" ]] || die "trainee executable $exe: no such file"
[[ -f "$exe" && -x "$exe" ]] || die "trainee executable $exe: not an executable file"
exe="$(realpath -s -- "$exe")"

# systemd refuses an executable path holding quotes, backslashes or control characters.
unsafe="[\"'\\[:cntrl:]]"
[[ ! "$exe" =~ $unsafe ]] ||
    die "trainee executable $exe: systemd cannot run a path holding quotes, backslashes or control characters"
# % starts a specifier in a unit file; a path holding whitespace must be quoted.
word="${exe//'%'/%%}"
if [[ "$word" =~ [[:space:]] ]]; then
    word="\"$word\""
fi

dest="${XDG_CONFIG_HOME:-$HOME/.config}/systemd/user"
mkdir -p -- "$dest"

# Write through temporary files in the destination, then rename: a failure leaves
# the installed units as they were.
service_tmp="$(mktemp -- "$dest/.trainee.service.XXXXXX")"
socket_tmp="$(mktemp -- "$dest/.trainee.socket.XXXXXX")"
trap 'rm -f -- "$service_tmp" "$socket_tmp"' EXIT

replaced=0
exec_line=''
while IFS= read -r line || [[ -n "$line" ]]; do
    if [[ "$line" == "$TEMPLATE_EXEC" || "$line" == "$TEMPLATE_EXEC "* ]]; then
        line="ExecStart=${word}${line#"$TEMPLATE_EXEC"}"
        exec_line="$line"
        replaced=$((replaced + 1))
    fi
    printf '%s\n' "$line"
done <"$here/trainee.service" >"$service_tmp"
[[ "$replaced" -eq 1 ]] ||
    die "$here/trainee.service: expected one line starting with $TEMPLATE_EXEC, found $replaced"
cat -- "$here/trainee.socket" >"$socket_tmp"

chmod 0644 -- "$service_tmp" "$socket_tmp"
mv -f -- "$service_tmp" "$dest/trainee.service"
mv -f -- "$socket_tmp" "$dest/trainee.socket"
trap - EXIT

printf 'Installed trainee.service and trainee.socket in %s\n' "$dest"
printf '  %s\n' "$exec_line"
hint='systemctl --user daemon-reload && systemctl --user enable --now trainee.socket'
if [[ -d /run/systemd/system && -S "${XDG_RUNTIME_DIR:-/nonexistent}/systemd/private" ]]; then
    printf 'Enable it with:\n  %s\n' "$hint"
else
    printf 'No systemd user manager is running here; once one is, enable it with:\n  %s\n' "$hint"
fi
