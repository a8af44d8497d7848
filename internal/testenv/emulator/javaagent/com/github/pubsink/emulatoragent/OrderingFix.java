/*
 * The third defect the agent fixes, in the emulator's own code:
 * com.google.cloud.pubsub.testing.v1.OrderedMessageBacklog, the state of
 * a subscription with message ordering.
 *
 * The backlog assigns each ordering key to the stream that pulls it
 * (orderingKeysToStreamIds) and, on a pull, skips a key assigned to another
 * stream while that key has messages delivered and not acked; a key with
 * nothing delivered goes to whichever stream pulls it. When a stream ends
 * (its process was killed, its connection dropped),
 * onStreamingPullCompleted drops every assignment to that stream, whatever
 * the key still has out: the key's messages not sent yet then go to the
 * next stream that pulls, at once, and the messages the dead stream held
 * come back only when their lease runs out, after them. A successor
 * applies the key's later messages before its earlier ones. Pub/Sub
 * delivers a key's messages in order, a redelivery bringing the key's
 * later messages again after it; docs/emulator-ordering.md has the
 * measurement.
 *
 * The fix: onStreamingPullCompleted drops no assignment. Its loop over
 * the assignments reads the field orderingKeysToStreamIds; that one
 * "getfield" becomes "invokestatic assignmentsToDrop" (ClassPatch), which
 * takes the backlog and returns an empty map, so the loop removes nothing.
 * A key the dead stream held stays its own while the key has messages
 * delivered, so no other stream gets the key's later messages; once the
 * held messages' leases run out they are no longer delivered, and the next
 * stream that pulls takes the key from its first unacked message, in
 * publish order. An assignment to a dead stream of a key with nothing
 * delivered is what the pull reassigns anyway.
 */
package com.github.pubsink.emulatoragent;

import java.io.IOException;
import java.util.HashMap;

public final class OrderingFix {
  static final String TARGET = "com/google/cloud/pubsub/testing/v1/OrderedMessageBacklog";
  private static final String FIELD = "orderingKeysToStreamIds";
  private static final String FIELD_DESC = "Ljava/util/HashMap;";
  private static final String HELPER = "com/github/pubsink/emulatoragent/OrderingFix";
  private static final String HELPER_METHOD = "assignmentsToDrop";
  private static final String HELPER_DESC = "(Ljava/lang/Object;)Ljava/util/HashMap;";

  private OrderingFix() {}

  /**
   * What onStreamingPullCompleted iterates, removing the ended stream's
   * assignments: nothing. The patched class calls it with the backlog's
   * lock held, where it read the field.
   */
  public static HashMap<String, Long> assignmentsToDrop(Object backlog) {
    return new HashMap<>();
  }

  /**
   * Returns the patched class file, or null if b does not read the field
   * the way this patch expects, exactly once (then the class is left as it
   * is): "getfield orderingKeysToStreamIds" followed by "invokevirtual
   * HashMap.entrySet", which only onStreamingPullCompleted's loop does; the
   * pull's reads of the field are followed by a get or a put.
   */
  static byte[] patch(byte[] b) throws IOException {
    ClassPatch c = ClassPatch.read(b);
    int field = c.fieldref(TARGET, FIELD, FIELD_DESC);
    int entrySet = c.methodref("java/util/HashMap", "entrySet", "()Ljava/util/Set;");
    if (field == 0 || entrySet == 0) {
      return null;
    }
    byte[] rest = c.rest;
    int found = -1;
    for (int i = 0; i + 5 < rest.length; i++) {
      if ((rest[i] & 0xff) == 0xb4 && ClassPatch.u2(rest, i + 1) == field
          && (rest[i + 3] & 0xff) == 0xb6 && ClassPatch.u2(rest, i + 4) == entrySet) {
        if (found >= 0) {
          return null; // read so twice: not the code this patch knows
        }
        found = i;
      }
    }
    if (found < 0) {
      return null;
    }
    c.callHelperAt(found);
    return c.withHelper(HELPER, HELPER_METHOD, HELPER_DESC);
  }
}
