#!/bin/sh
# Builds the Java agent that fixes the Pub/Sub emulator's two defects (README,
# "The Pub/Sub emulator fixes") from its sources, as internal/testenv/emulator
# does for the tests (agent.go: writeAgentJar), for the compose image:
#   build-agent.sh SOURCES EMULATOR_JAR OUT_JAR
# SOURCES is internal/testenv/emulator/javaagent; EMULATOR_JAR the emulator's
# lib/cloud-pubsub-emulator-*.jar (the replacement class compiles against its
# grpc classes). Needs javac and jar (a JDK 17 or newer). deploy's tests run
# it against the installed emulator and start the emulator with its jar.
set -eu
src=$1 emulator_jar=$2 out=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
find "$src" -name '*.java' > "$work/sources"
javac --release 17 -nowarn -cp "$emulator_jar" -d "$work/classes" @"$work/sources"
# The replacement io.grpc.InternalStatus travels as a resource next to the
# agent class, without a .class suffix, so that no class loader defines it
# from the jar (the agent hands its bytes to the emulator's loader).
mv "$work/classes/io/grpc/InternalStatus.class" "$work/classes/com/github/pubsink/emulatoragent/InternalStatus.class.bin"
rm -r "$work/classes/io"
jar --create --file "$out" --manifest "$src/MANIFEST.MF" -C "$work/classes" .
