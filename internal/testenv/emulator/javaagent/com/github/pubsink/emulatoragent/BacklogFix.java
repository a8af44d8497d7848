/*
 * The second defect the agent fixes, in the emulator's own code:
 * com.google.cloud.pubsub.testing.v1.MessageBacklog, the state of one
 * subscription, under a retry policy (pubsink setup gives every main
 * subscription one).
 *
 * A message whose delivery attempt is not its first, and whose lease
 * expires or which is nacked, is not made deliverable again at once: its ack
 * ID goes into delayedMessagesByTime (a sorted map of release time to ack
 * IDs), and expireOutstandingMessages, run every few milliseconds, calls
 * nackMessage(ackId) for the ack IDs whose time has come, then drops the
 * entry. But every pull that finds the lease still expired queues the ack ID
 * again, under a later time (insertDelayedMessage skips it only when some
 * entry holds that one ack ID alone), so an ack ID can wait in two entries.
 * The first release removes it from the delivered map; the second finds no
 * DeliveryInfo, and nackMessage throws a NullPointerException before the
 * entry is dropped. That entry is the oldest, so it is tried first on every
 * run, forever: from then on no delayed message of the subscription is ever
 * released. Its messages stay out of sight for the emulator's life, leased
 * to nobody and never pulled again. The emulator logs nothing (its logger
 * has no backend). TestEmulatorReleasesDelayedRedeliveries reproduces it.
 *
 * The fix: every call of MessageBacklog.nackMessage(String) goes through
 * nack below, which skips an ack ID that is no longer delivered (it was
 * released already, or acked: there is nothing left to do). The class file
 * is patched without a bytecode library: a Methodref to nack is appended to
 * the constant pool, and each "invokespecial nackMessage" becomes
 * "invokestatic nack". Both take the backlog and the ack ID and return
 * nothing, so the operand stack, the stack map frames and every code offset
 * stay as they were.
 */
package com.github.pubsink.emulatoragent;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Map;

public final class BacklogFix {
  static final String TARGET = "com/google/cloud/pubsub/testing/v1/MessageBacklog";
  private static final String METHOD = "nackMessage";
  private static final String METHOD_DESC = "(Ljava/lang/String;)V";
  private static final String HELPER = "com/github/pubsink/emulatoragent/BacklogFix";
  private static final String HELPER_METHOD = "nack";
  private static final String HELPER_DESC = "(Ljava/lang/Object;Ljava/lang/String;)V";

  private static volatile Method nackMessage;
  private static volatile Field delivered;

  private BacklogFix() {}

  /**
   * Does what MessageBacklog.nackMessage(ackId) does, unless ackId is no
   * longer in the backlog's delivered map. The patched class calls it with
   * the backlog's lock held, as it called nackMessage.
   */
  public static void nack(Object backlog, String ackId) throws Throwable {
    if (nackMessage == null) {
      Class<?> c = backlog.getClass();
      Field f = c.getDeclaredField("delivered");
      f.setAccessible(true);
      Method m = c.getDeclaredMethod(METHOD, String.class);
      m.setAccessible(true);
      delivered = f;
      nackMessage = m;
    }
    if (!((Map<?, ?>) delivered.get(backlog)).containsKey(ackId)) {
      return;
    }
    try {
      nackMessage.invoke(backlog, ackId);
    } catch (java.lang.reflect.InvocationTargetException e) {
      throw e.getCause();
    }
  }

  /**
   * Returns the patched class file, or null if b does not call nackMessage
   * the way this patch expects (then the class is left as it is); calls
   * counts the calls it redirected.
   */
  static byte[] patch(byte[] b, int[] calls) throws IOException {
    Pool pool = Pool.read(b);
    int target = pool.methodref(TARGET, METHOD, METHOD_DESC);
    if (target == 0) {
      return null;
    }
    // The appended entries: Utf8 class name, Class, Utf8 name, Utf8
    // descriptor, NameAndType, Methodref (the last one is what we call).
    int n = pool.count;
    ByteArrayOutputStream extra = new ByteArrayOutputStream();
    DataOutputStream out = new DataOutputStream(extra);
    utf8(out, HELPER); // n
    out.writeByte(7); // Class, n+1
    out.writeShort(n);
    utf8(out, HELPER_METHOD); // n+2
    utf8(out, HELPER_DESC); // n+3
    out.writeByte(12); // NameAndType, n+4
    out.writeShort(n + 2);
    out.writeShort(n + 3);
    out.writeByte(10); // Methodref, n+5
    out.writeShort(n + 1);
    out.writeShort(n + 4);
    int helper = n + 5;

    byte[] rest = Arrays.copyOfRange(b, pool.end, b.length);
    calls[0] = 0;
    for (int i = 0; i + 2 < rest.length; i++) {
      // invokespecial #target, right after the aload of its argument (the
      // only way the emulator calls it): aload_1..3, or aload n.
      if ((rest[i] & 0xff) == 0xb7 && u2(rest, i + 1) == target && i > 0 && isArgLoad(rest, i)) {
        rest[i] = (byte) 0xb8; // invokestatic
        rest[i + 1] = (byte) (helper >> 8);
        rest[i + 2] = (byte) helper;
        calls[0]++;
      }
    }
    if (calls[0] == 0) {
      return null;
    }
    ByteArrayOutputStream res = new ByteArrayOutputStream(b.length + extra.size());
    res.write(b, 0, 8);
    res.write((n + 6) >> 8);
    res.write(n + 6);
    res.write(b, 10, pool.end - 10);
    extra.writeTo(res);
    res.write(rest);
    return res.toByteArray();
  }

  private static boolean isArgLoad(byte[] code, int i) {
    int op = code[i - 1] & 0xff;
    if (op >= 0x2b && op <= 0x2d) { // aload_1, aload_2, aload_3
      return true;
    }
    return i > 1 && (code[i - 2] & 0xff) == 0x19; // aload n
  }

  private static void utf8(DataOutputStream out, String s) throws IOException {
    byte[] v = s.getBytes(StandardCharsets.UTF_8);
    out.writeByte(1);
    out.writeShort(v.length);
    out.write(v);
  }

  private static int u2(byte[] b, int i) {
    return ((b[i] & 0xff) << 8) | (b[i + 1] & 0xff);
  }

  /** The constant pool of a class file: where each entry starts, and where it ends. */
  private static final class Pool {
    final byte[] b;
    final int count; // constant_pool_count: entries are 1..count-1
    final int[] at;
    int end;

    private Pool(byte[] b, int count) {
      this.b = b;
      this.count = count;
      this.at = new int[count];
    }

    static Pool read(byte[] b) throws IOException {
      if (b.length < 10 || u2(b, 0) != 0xcafe || u2(b, 2) != 0xbabe) {
        throw new IOException("not a class file");
      }
      Pool p = new Pool(b, u2(b, 8));
      int i = 10;
      for (int k = 1; k < p.count; k++) {
        p.at[k] = i;
        int tag = b[i] & 0xff;
        switch (tag) {
          case 1: i += 3 + u2(b, i + 1); break; // Utf8
          case 3: case 4: i += 5; break; // Integer, Float
          case 5: case 6: i += 9; k++; break; // Long, Double: two slots
          case 7: case 8: case 16: case 19: case 20: i += 3; break; // Class, String, MethodType, Module, Package
          case 9: case 10: case 11: case 12: case 17: case 18: i += 5; break; // refs, NameAndType, Dynamic
          case 15: i += 4; break; // MethodHandle
          default: throw new IOException("constant pool tag " + tag);
        }
      }
      p.end = i;
      return p;
    }

    String utf8(int k) {
      int i = at[k];
      if ((b[i] & 0xff) != 1) {
        return null;
      }
      return new String(b, i + 3, u2(b, i + 1), StandardCharsets.UTF_8);
    }

    /** The index of the Methodref owner.name desc, or 0. */
    int methodref(String owner, String name, String desc) {
      for (int k = 1; k < count; k++) {
        int i = at[k];
        if (i == 0 || (b[i] & 0xff) != 10) {
          continue;
        }
        int cls = at[u2(b, i + 1)], nat = at[u2(b, i + 3)];
        if (owner.equals(utf8(u2(b, cls + 1))) && name.equals(utf8(u2(b, nat + 1))) && desc.equals(utf8(u2(b, nat + 3)))) {
          return k;
        }
      }
      return 0;
    }
  }
}
