#!/usr/bin/env bash
# make-secrets.sh - write the credentials docker/compose.yml mounts as secrets, once.
#
#   bash docker/make-secrets.sh [DIR]      (DIR default: docker/secrets)
#
# Writes, with fresh random passwords (from /dev/urandom):
#   60-users.conf  RabbitMQ default_user / default_pass (conf.d fragment)
#   redis.conf     Redis requirepass (config fragment)
#   amqp_url       amqp://v4fleet:PASS@rabbitmq:5672/   (worker: V4_AMQP_URL_FILE)
#   redis_url      redis://:PASS@redis:6379/0           (worker: V4_REDIS_URL_FILE)
# Existing files are kept (re-running never changes a password a broker already uses;
# delete DIR to start over - RabbitMQ applies default_user only to an empty data volume).
# DIR is 0700 (other host users cannot read it); the files are 0644 because compose
# bind-mounts them as they are and the containers read them as non-root users.
# Prints nothing secret.
set -euo pipefail
dir="${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/secrets}"
mkdir -p "$dir"
chmod 0700 "$dir"

rand() {   # 48 hex digits (192 bits): no escaping needed in URLs or config files
    od -An -tx1 -N24 /dev/urandom | tr -d ' \n'
}

write() {   # write FILE CONTENT, unless FILE exists
    local f="$dir/$1"
    if [ -e "$f" ]; then
        echo "kept    $f"
        return 0
    fi
    (umask 022 && printf '%s\n' "$2" > "$f.tmp" && mv "$f.tmp" "$f")
    echo "written $f"
}

if [ -e "$dir/60-users.conf" ] && [ -e "$dir/amqp_url" ]; then
    write 60-users.conf unused
    write amqp_url unused
else
    amqp_pass="$(rand)"
    rm -f "$dir/60-users.conf" "$dir/amqp_url"
    write 60-users.conf "default_user = v4fleet
default_pass = $amqp_pass"
    write amqp_url "amqp://v4fleet:$amqp_pass@rabbitmq:5672/"
fi
if [ -e "$dir/redis.conf" ] && [ -e "$dir/redis_url" ]; then
    write redis.conf unused
    write redis_url unused
else
    redis_pass="$(rand)"
    rm -f "$dir/redis.conf" "$dir/redis_url"
    write redis.conf "requirepass $redis_pass"
    write redis_url "redis://:$redis_pass@redis:6379/0"
fi
