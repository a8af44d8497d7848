/*
 * What the agent's class patches share: reading a class file's constant
 * pool, finding a field or method reference in it, and appending a
 * Methodref to a static helper of the agent, so that an instruction of the
 * emulator's bytecode can be pointed at the helper in place. No bytecode
 * library: a patch swaps an instruction for one of the same length and the
 * same stack effect, so the operand stack, the stack map frames and every
 * code offset stay as they were, and only the constant pool grows.
 */
package com.github.pubsink.emulatoragent;

import java.io.ByteArrayOutputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

final class ClassPatch {
  private static final int FIELDREF = 9, METHODREF = 10;

  private final byte[] b;
  private final int count; // constant_pool_count: entries are 1..count-1
  private final int[] at;
  private final int end;
  /** The class file after the constant pool, for the patch to change. */
  final byte[] rest;

  private ClassPatch(byte[] b, int count, int[] at, int end) {
    this.b = b;
    this.count = count;
    this.at = at;
    this.end = end;
    this.rest = Arrays.copyOfRange(b, end, b.length);
  }

  static ClassPatch read(byte[] b) throws IOException {
    if (b.length < 10 || u2(b, 0) != 0xcafe || u2(b, 2) != 0xbabe) {
      throw new IOException("not a class file");
    }
    int count = u2(b, 8);
    int[] at = new int[count];
    int i = 10;
    for (int k = 1; k < count; k++) {
      at[k] = i;
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
    return new ClassPatch(b, count, at, i);
  }

  /** The index of the Methodref owner.name desc, or 0. */
  int methodref(String owner, String name, String desc) {
    return ref(METHODREF, owner, name, desc);
  }

  /** The index of the Fieldref owner.name desc, or 0. */
  int fieldref(String owner, String name, String desc) {
    return ref(FIELDREF, owner, name, desc);
  }

  private int ref(int tag, String owner, String name, String desc) {
    for (int k = 1; k < count; k++) {
      int i = at[k];
      if (i == 0 || (b[i] & 0xff) != tag) {
        continue;
      }
      int cls = at[u2(b, i + 1)], nat = at[u2(b, i + 3)];
      if (owner.equals(utf8(u2(b, cls + 1))) && name.equals(utf8(u2(b, nat + 1))) && desc.equals(utf8(u2(b, nat + 3)))) {
        return k;
      }
    }
    return 0;
  }

  private String utf8(int k) {
    int i = at[k];
    if ((b[i] & 0xff) != 1) {
      return null;
    }
    return new String(b, i + 3, u2(b, i + 1), StandardCharsets.UTF_8);
  }

  /**
   * The index that the Methodref appended by withHelper will have: an
   * instruction of rest pointed at it calls the helper.
   */
  int helperIndex() {
    return count + 5;
  }

  /**
   * Returns the class file with rest as changed and, appended to the
   * constant pool, a Methodref of the static method owner.name desc (with
   * the Utf8, Class and NameAndType entries it needs) at helperIndex.
   */
  byte[] withHelper(String owner, String name, String desc) throws IOException {
    int n = count;
    ByteArrayOutputStream extra = new ByteArrayOutputStream();
    DataOutputStream out = new DataOutputStream(extra);
    utf8(out, owner); // n
    out.writeByte(7); // Class, n+1
    out.writeShort(n);
    utf8(out, name); // n+2
    utf8(out, desc); // n+3
    out.writeByte(12); // NameAndType, n+4
    out.writeShort(n + 2);
    out.writeShort(n + 3);
    out.writeByte(METHODREF); // n+5
    out.writeShort(n + 1);
    out.writeShort(n + 4);
    ByteArrayOutputStream res = new ByteArrayOutputStream(b.length + extra.size());
    res.write(b, 0, 8);
    res.write((n + 6) >> 8);
    res.write(n + 6);
    res.write(b, 10, end - 10);
    extra.writeTo(res);
    res.write(rest);
    return res.toByteArray();
  }

  /** Points the 3-byte instruction at rest[i] at the helper: invokestatic helperIndex. */
  void callHelperAt(int i) {
    int helper = helperIndex();
    rest[i] = (byte) 0xb8; // invokestatic
    rest[i + 1] = (byte) (helper >> 8);
    rest[i + 2] = (byte) helper;
  }

  private static void utf8(DataOutputStream out, String s) throws IOException {
    byte[] v = s.getBytes(StandardCharsets.UTF_8);
    out.writeByte(1);
    out.writeShort(v.length);
    out.write(v);
  }

  static int u2(byte[] b, int i) {
    return ((b[i] & 0xff) << 8) | (b[i + 1] & 0xff);
  }
}
