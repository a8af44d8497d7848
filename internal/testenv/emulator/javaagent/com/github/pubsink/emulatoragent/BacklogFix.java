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
 * released already, or acked: there is nothing left to do). Each
 * "invokespecial nackMessage" becomes "invokestatic nack" (ClassPatch):
 * both take the backlog and the ack ID and return nothing.
 */
package com.github.pubsink.emulatoragent;

import java.io.IOException;
import java.lang.reflect.Field;
import java.lang.reflect.Method;
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
    ClassPatch c = ClassPatch.read(b);
    int target = c.methodref(TARGET, METHOD, METHOD_DESC);
    if (target == 0) {
      return null;
    }
    byte[] rest = c.rest;
    calls[0] = 0;
    for (int i = 0; i + 2 < rest.length; i++) {
      // invokespecial #target, right after the aload of its argument (the
      // only way the emulator calls it): aload_1..3, or aload n.
      if ((rest[i] & 0xff) == 0xb7 && ClassPatch.u2(rest, i + 1) == target && i > 0 && isArgLoad(rest, i)) {
        c.callHelperAt(i);
        calls[0]++;
      }
    }
    if (calls[0] == 0) {
      return null;
    }
    return c.withHelper(HELPER, HELPER_METHOD, HELPER_DESC);
  }

  private static boolean isArgLoad(byte[] code, int i) {
    int op = code[i - 1] & 0xff;
    if (op >= 0x2b && op <= 0x2d) { // aload_1, aload_2, aload_3
      return true;
    }
    return i > 1 && (code[i - 2] & 0xff) == 0x19; // aload n
  }

}
