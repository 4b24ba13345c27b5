// Constants shared by the mCAS unit, its memory model and its testbenches.
//
// The wire format of the published prototype (docs/design.md §9.2), little-endian, byte 0 in bits [7:0]:
//   spwr line (64 B): bytes 0-7 expected, 8-15 swap, 16-23 target byte address, 24-31 requester id,
//                     32-63 padding;
//   sprd answer (16 B): bytes 0-7 previous value, 8-15 success flag (1 = swapped, 0 = not).
// An answer that carries an error code other than MCAS_ERR_NONE did not touch memory; its
// previous value and success flag are zero.
package mcas_pkg;

  localparam int MCAS_LINE_BITS = 512;
  localparam int MCAS_ANSWER_BITS = 128;

  localparam logic [1:0] MCAS_ERR_NONE = 2'd0;
  // The requester id is not below NUM_REQUESTERS: no register holds its operands.
  localparam logic [1:0] MCAS_ERR_BAD_ID = 2'd1;
  // A sprd with no spwr before it (or a second sprd for one spwr).
  localparam logic [1:0] MCAS_ERR_NO_OPERANDS = 2'd2;
  // The target is not 8-byte aligned or lies outside the device memory.
  localparam logic [1:0] MCAS_ERR_BAD_TARGET = 2'd3;

endpackage
