/*
 * A Java agent that fixes three defects of the Pub/Sub emulator without
 * touching the installed files: io.grpc.InternalStatus (see
 * ../../../../io/grpc/InternalStatus.java), the delayed redelivery of
 * MessageBacklog (see BacklogFix.java) and the ordering key handoff of
 * OrderedMessageBacklog when a stream ends (see OrderingFix.java). internal/testenv/emulator/doc.go says
 * how pubsink starts it (JAVA_OPTS=-javaagent:<jar>).
 *
 * The replacement class travels inside the agent jar as the resource
 * InternalStatus.class.bin, not as a .class file: the JVM appends agent jars
 * to the system class path, so a real io/grpc/InternalStatus.class there would
 * be a second, competing definition of the class (shadowed today because the
 * emulator jar comes first, loaded without the check below if that order ever
 * changed). As a resource it is only bytes that this transformer returns when
 * the emulator's own class loader loads the class.
 *
 * The agent writes one line to stderr when it is installed ("pubsink-agent:
 * installed") and one when it replaces the class; the Go side checks the first
 * to prove that JAVA_OPTS reached the JVM.
 */
package com.github.pubsink.emulatoragent;

import java.io.IOException;
import java.io.InputStream;
import java.lang.instrument.ClassFileTransformer;
import java.lang.instrument.Instrumentation;
import java.nio.charset.StandardCharsets;
import java.security.ProtectionDomain;

public final class Agent {
  private static final String TARGET = "io/grpc/InternalStatus";
  private static final String RESOURCE = "InternalStatus.class.bin";
  private static final String MISSING_METHOD = "asRuntimeException";

  private Agent() {}

  public static void premain(String args, Instrumentation inst) throws IOException {
    byte[] replacement;
    try (InputStream in = Agent.class.getResourceAsStream(RESOURCE)) {
      if (in == null) {
        throw new IllegalStateException("pubsink-agent: resource " + RESOURCE + " missing from agent jar");
      }
      replacement = in.readAllBytes();
    }
    inst.addTransformer(new Transformer(replacement));
    System.err.println("pubsink-agent: installed");
  }

  private static final class Transformer implements ClassFileTransformer {
    private final byte[] replacement;

    Transformer(byte[] replacement) {
      this.replacement = replacement;
    }

    @Override
    public byte[] transform(
        ClassLoader loader,
        String className,
        Class<?> classBeingRedefined,
        ProtectionDomain protectionDomain,
        byte[] classfileBuffer) {
      if (classBeingRedefined != null) {
        return null;
      }
      if (BacklogFix.TARGET.equals(className)) {
        return patched("MessageBacklog", classfileBuffer, b -> {
          int[] calls = new int[1];
          byte[] p = BacklogFix.patch(b, calls);
          return p == null ? null : new Patched(p, calls[0] + " calls of nackMessage go through BacklogFix.nack");
        });
      }
      if (OrderingFix.TARGET.equals(className)) {
        return patched("OrderedMessageBacklog", classfileBuffer, b -> {
          byte[] p = OrderingFix.patch(b);
          return p == null ? null : new Patched(p, "a stream's end drops no ordering key's stream");
        });
      }
      if (!TARGET.equals(className)) {
        return null;
      }
      // A grpc-core that already has the method needs no help, and our copy
      // could lack members it has gained since; leave it alone.
      if (hasUtf8Constant(classfileBuffer, MISSING_METHOD)) {
        System.err.println("pubsink-agent: io.grpc.InternalStatus already has " + MISSING_METHOD + "; left as is");
        return null;
      }
      System.err.println("pubsink-agent: replaced io.grpc.InternalStatus (adds " + MISSING_METHOD + "(Status, Metadata, boolean))");
      return replacement.clone();
    }
  }

  /** A patched class file and what the patch did, for the log. */
  private record Patched(byte[] bytes, String what) {}

  private interface Patch {
    Patched apply(byte[] b) throws IOException;
  }

  /**
   * Applies patch to the class name and logs the outcome: the patched bytes,
   * or null (the class left as it is) when the patch does not recognise the
   * code or fails.
   */
  private static byte[] patched(String name, byte[] b, Patch patch) {
    try {
      Patched p = patch.apply(b);
      if (p == null) {
        System.err.println("pubsink-agent: " + name + " is not the code the patch knows; left as is");
        return null;
      }
      System.err.println("pubsink-agent: patched " + name + " (" + p.what() + ")");
      return p.bytes();
    } catch (Throwable t) {
      System.err.println("pubsink-agent: " + name + " left as is: " + t);
      return null;
    }
  }

  /**
   * Reports whether the class file holds the CONSTANT_Utf8 entry s, which it
   * does when it declares or calls a member named s. Entries are tag 1, a
   * two-byte length, then the bytes, so a longer name such as
   * asRuntimeExceptionWithoutStacktrace does not match.
   */
  static boolean hasUtf8Constant(byte[] b, String s) {
    byte[] want = s.getBytes(StandardCharsets.UTF_8);
    outer:
    for (int i = 0; i + 3 + want.length <= b.length; i++) {
      if (b[i] != 1 || b[i + 1] != (byte) (want.length >> 8) || b[i + 2] != (byte) want.length) {
        continue;
      }
      for (int j = 0; j < want.length; j++) {
        if (b[i + 3 + j] != want[j]) {
          continue outer;
        }
      }
      return true;
    }
    return false;
  }
}
