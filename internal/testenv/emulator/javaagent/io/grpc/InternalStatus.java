/*
 * Replacement for io.grpc.InternalStatus inside the Pub/Sub emulator 0.8.20.
 *
 * The emulator's fat jar bundles grpc-core classes from two grpc-java
 * releases: ServerCallImpl (newer) calls
 * InternalStatus.asRuntimeException(Status, Metadata, boolean), which the
 * bundled InternalStatus (older) does not have. Every StreamingPull stream that
 * ends uncleanly (client cancel, connection loss) then dies with
 * NoSuchMethodError before the emulator's onCancel runs, and the emulator keeps
 * sending messages to the dead stream until their lease runs out.
 *
 * This class keeps every public member of the bundled one, with the same
 * behaviour, and adds the missing method. It is compiled against the emulator
 * jar (it needs the package-private Status.MESSAGE_KEY, Status.CODE_KEY and
 * InternalStatusRuntimeException) and is never loaded from a class path: the
 * agent in com.github.pubsink.emulatoragent hands its bytes to the JVM when the
 * emulator's own class loader asks for io/grpc/InternalStatus.
 */
package io.grpc;

public final class InternalStatus {
  private InternalStatus() {}

  /** Same object as the bundled class: the key of the grpc-message trailer. */
  public static final Metadata.Key<String> MESSAGE_KEY = Status.MESSAGE_KEY;

  /** Same object as the bundled class: the key of the grpc-status trailer. */
  public static final Metadata.Key<Status> CODE_KEY = Status.CODE_KEY;

  /** As in the bundled class: an exception that skips fillInStackTrace. */
  public static StatusRuntimeException asRuntimeExceptionWithoutStacktrace(
      Status status, Metadata trailers) {
    return new InternalStatusRuntimeException(status, trailers);
  }

  /**
   * The method the newer ServerCallImpl calls. Upstream it passes the flag to a
   * StatusRuntimeException constructor that the bundled class lacks; the two
   * public constructors give the same observable result.
   */
  public static StatusRuntimeException asRuntimeException(
      Status status, Metadata trailers, boolean fillInStackTrace) {
    if (!fillInStackTrace) {
      return asRuntimeExceptionWithoutStacktrace(status, trailers);
    }
    return new StatusRuntimeException(status, trailers);
  }
}
