#!/bin/sh
# PID 1 of a Reservoir lab guest (the kernel's init=): mounts the kernel's file
# systems, loads what the lab uses, then becomes the command agent, which answers
# the host on the virtio-serial port "reservoir". No service manager: a guest boots
# in seconds of guest time under TCG, and each test starts only the daemons it needs.
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev 2>/dev/null
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /run/lock /run/shm
chmod 1777 /run/lock /tmp
mount -o remount,rw /
modprobe configfs 2>/dev/null
mount -t configfs configfs /sys/kernel/config 2>/dev/null
for m in virtio_console virtio_net 9pnet_virtio 9p; do modprobe "$m" 2>/dev/null; done
hostname -F /etc/hostname 2>/dev/null
ip link set lo up
echo "reservoir-guest: init done, starting the agent" >/dev/console
exec python3 /usr/local/lib/reservoir/guest_agent.py
