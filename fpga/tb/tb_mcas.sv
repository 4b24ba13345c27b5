// Self-checking Icarus Verilog testbench of mcas_unit behind mcas_mem (script/fpga.sh runs it with
// several NUM_REQUESTERS / LATENCY pairs).
//
//   vvp tb_mcas.vvp                          every scenario; prints "FAIL: ..." per failed check and
//                                            ends with "tb_mcas: N checks, M failed", exit status 1
//                                            when M > 0 (through $fatal)
//   vvp tb_mcas.vvp +scenario=fig6 +vcd=F    only the Figure 6 scenario, dumped to the VCD file F
//
// Stimulus discipline: every task starts and ends at a falling clock edge and drives inputs there,
// so the design samples stable values at the rising edge and the testbench reads settled outputs.
// Monitors on the rising edge record the cycle of every transfer; timing checks compare those.
// Requester ids stay below 5 so that the smallest configuration (5 requesters, whose 3-bit index
// can still encode 5..7) exercises the out-of-range rejection on ids that a truncating decoder
// would accept.
`timescale 1ns / 1ps

module tb_mcas;
  import mcas_pkg::*;

  parameter int NUM_REQUESTERS = 64;
  parameter int LATENCY = 4;
  localparam int WORDS = 64;
  localparam int ADDR_W = 16;
  localparam int LOG = 256;  // transfers remembered per channel; far more than one scenario uses

  logic clk = 1'b0;
  always #5 clk = ~clk;

  logic rst;
  logic [63:0] cfg_words = 64'(WORDS);
  logic req_valid, req_ready, req_spwr;
  logic [63:0] req_id;
  logic [MCAS_LINE_BITS-1:0] req_line;
  logic rsp_valid, rsp_ready;
  logic [63:0] rsp_id;
  logic [MCAS_ANSWER_BITS-1:0] rsp_line;
  logic [1:0] rsp_error;
  logic spwr_dropped;
  logic mem_req_valid, mem_req_ready, mem_req_write, mem_rsp_valid;
  logic [ADDR_W-1:0] mem_req_addr;
  logic [63:0] mem_req_wdata, mem_rsp_rdata;

  mcas_unit #(
      .NUM_REQUESTERS(NUM_REQUESTERS),
      .MEM_ADDR_W(ADDR_W)
  ) dut (
      .clk,
      .rst,
      .cfg_words,
      .req_valid,
      .req_ready,
      .req_spwr,
      .req_id,
      .req_line,
      .rsp_valid,
      .rsp_ready,
      .rsp_id,
      .rsp_line,
      .rsp_error,
      .spwr_dropped,
      .mem_req_valid,
      .mem_req_ready,
      .mem_req_write,
      .mem_req_addr,
      .mem_req_wdata,
      .mem_rsp_valid,
      .mem_rsp_rdata
  );

  mcas_mem #(
      .WORDS(WORDS),
      .LATENCY(LATENCY),
      .ADDR_W(ADDR_W)
  ) u_mem (
      .clk,
      .rst,
      .req_valid(mem_req_valid),
      .req_ready(mem_req_ready),
      .req_write(mem_req_write),
      .req_addr(mem_req_addr),
      .req_wdata(mem_req_wdata),
      .rsp_valid(mem_rsp_valid),
      .rsp_rdata(mem_rsp_rdata)
  );

  // Named views for the timing diagram: who is talking, and what the answer says.
  wire [63:0] requester = req_spwr ? req_line[255:192] : req_id;
  wire [63:0] rsp_prev = rsp_line[63:0];
  wire rsp_success = rsp_line[64];

  // ---- Monitors ----------------------------------------------------------------------------------

  int cycle = 0;
  always @(posedge clk) cycle <= cycle + 1;

  int n_rsp = 0, n_mem_req = 0, n_dropped = 0;
  logic [63:0] rsp_log_id[LOG], rsp_log_prev[LOG];
  logic rsp_log_success[LOG];
  logic [1:0] rsp_log_error[LOG];
  int last_wr_ack_cycle = -1;
  logic mem_last_write = 1'b0;

  always @(posedge clk) begin
    if (rsp_valid && rsp_ready) begin
      rsp_log_id[n_rsp % LOG] <= rsp_id;
      rsp_log_prev[n_rsp % LOG] <= rsp_line[63:0];
      rsp_log_success[n_rsp % LOG] <= rsp_line[64];
      rsp_log_error[n_rsp % LOG] <= rsp_error;
      n_rsp <= n_rsp + 1;
    end
    if (mem_req_valid && mem_req_ready) begin
      n_mem_req <= n_mem_req + 1;
      mem_last_write <= mem_req_write;
    end
    if (mem_rsp_valid && mem_last_write) last_wr_ack_cycle <= cycle;
    if (spwr_dropped) n_dropped <= n_dropped + 1;
  end

  // ---- Checking ----------------------------------------------------------------------------------

  int checks = 0, failures = 0;

  task automatic check(input bit ok, input string what);
    checks++;
    if (!ok) begin
      failures++;
      $display("FAIL: [%0t] %s", $time, what);
    end
  endtask

  task automatic check_eq(input logic [63:0] got, input logic [63:0] want, input string what);
    check(got === want, $sformatf("%s: got %0d (0x%0h), want %0d (0x%0h)", what, got, got, want,
                                  want));
  endtask

  // ---- Stimulus ----------------------------------------------------------------------------------

  int n_taken = 0;  // answers consumed by `answer`

  // Offers one request and returns once it has been transferred; `offered` / `accepted` are the
  // cycles of the first edge it was offered at and of the edge that took it.
  task automatic offer(input logic spwr, input logic [63:0] id, input logic [MCAS_LINE_BITS-1:0] line,
                       output int offered, output int accepted);
    req_valid = 1'b1;
    req_spwr = spwr;
    req_id = id;
    req_line = line;
    offered = cycle;
    #1;  // req_ready depends on req_spwr: let it settle
    while (!req_ready) @(negedge clk);
    accepted = cycle;
    @(negedge clk);
    req_valid = 1'b0;
  endtask

  task automatic spwr(input logic [63:0] id, input logic [63:0] expected, input logic [63:0] swap,
                      input logic [63:0] target);
    int offered, accepted;
    offer(1'b1, 64'b0, {256'b0, id, target, swap, expected}, offered, accepted);
  endtask

  task automatic sprd(input logic [63:0] id);
    int offered, accepted;
    offer(1'b0, id, '0, offered, accepted);
  endtask

  // Waits for the next answer and returns it.
  task automatic answer(output logic [63:0] id, output logic [63:0] prev, output logic success,
                        output logic [1:0] error);
    while (n_rsp <= n_taken) @(negedge clk);
    id = rsp_log_id[n_taken % LOG];
    prev = rsp_log_prev[n_taken % LOG];
    success = rsp_log_success[n_taken % LOG];
    error = rsp_log_error[n_taken % LOG];
    n_taken++;
  endtask

  // Waits for the next answer and checks it against (id, prev, success, error).
  task automatic expect_answer(input logic [63:0] want_id, input logic [63:0] want_prev,
                               input logic want_success, input logic [1:0] want_error,
                               input string what);
    logic [63:0] id, prev;
    logic success;
    logic [1:0] error;
    answer(id, prev, success, error);
    check_eq(id, want_id, {what, ": answer's requester"});
    check_eq(prev, want_prev, {what, ": previous value"});
    check_eq(64'(success), 64'(want_success), {what, ": success flag"});
    check_eq(64'(error), 64'(want_error), {what, ": error code"});
  endtask

  task automatic cas(input logic [63:0] id, input logic [63:0] expected, input logic [63:0] swap,
                     input logic [63:0] target, input logic [63:0] want_prev,
                     input logic want_success, input logic [1:0] want_error, input string what);
    spwr(id, expected, swap, target);
    sprd(id);
    expect_answer(id, want_prev, want_success, want_error, what);
  endtask

  // Backdoor access to the memory model, only while the unit is idle.
  task automatic poke(input int word, input logic [63:0] value);
    u_mem.words[word] = value;
  endtask

  function automatic logic [63:0] peek(input int word);
    return u_mem.words[word];
  endfunction

  task automatic wait_for_mem_request(input logic write);
    while (!(mem_req_valid && mem_req_write == write)) @(negedge clk);
  endtask

  task automatic idle(input int cycles);
    repeat (cycles) @(negedge clk);
  endtask

  // ---- Scenarios ---------------------------------------------------------------------------------

  task automatic test_success;
    poke(1, 5);
    cas(0, 5, 9, 8, 5, 1'b1, MCAS_ERR_NONE, "success");
    check_eq(peek(1), 9, "success: swap value written");
  endtask

  task automatic test_mismatch;
    int mem_before = n_mem_req;
    poke(2, 7);
    cas(1, 6, 100, 16, 7, 1'b0, MCAS_ERR_NONE, "expected value differs");
    check_eq(peek(2), 7, "expected value differs: memory unchanged");
    check_eq(n_mem_req - mem_before, 1, "expected value differs: one read, no write");
  endtask

  // Figure 6(b): A and B park operands for one word; A's success fails B without B reading memory,
  // and B learns the value A wrote.
  task automatic test_conflict_after_success;
    int mem_before;
    poke(3, 10);
    spwr(2, 10, 11, 24);
    spwr(3, 10, 12, 24);
    mem_before = n_mem_req;
    sprd(2);
    sprd(3);
    expect_answer(2, 10, 1'b1, MCAS_ERR_NONE, "conflict after success: first sprd");
    expect_answer(3, 11, 1'b0, MCAS_ERR_NONE, "conflict after success: second sprd");
    check_eq(n_mem_req - mem_before, 2, "conflict after success: only the winner touches memory");
    check_eq(peek(3), 11, "conflict after success: winner's value stays");
  endtask

  // A completion fails the others even when it failed itself: B fails although its expected value
  // still matches memory (a spurious failure), and succeeds when it retries.
  task automatic test_conflict_after_failure;
    poke(4, 20);
    spwr(3, 99, 1, 32);
    spwr(4, 20, 21, 32);
    sprd(3);
    sprd(4);
    expect_answer(3, 20, 1'b0, MCAS_ERR_NONE, "conflict after failure: first sprd mismatches");
    expect_answer(4, 20, 1'b0, MCAS_ERR_NONE, "conflict after failure: second sprd fails anyway");
    check_eq(peek(4), 20, "conflict after failure: memory unchanged");
    cas(4, 20, 21, 32, 20, 1'b1, MCAS_ERR_NONE, "conflict after failure: retry succeeds");
  endtask

  task automatic test_independent_words;
    poke(5, 1);
    poke(6, 2);
    spwr(0, 1, 100, 40);
    spwr(1, 2, 200, 48);
    sprd(0);
    sprd(1);
    expect_answer(0, 1, 1'b1, MCAS_ERR_NONE, "independent words: first");
    expect_answer(1, 2, 1'b1, MCAS_ERR_NONE, "independent words: second");
    check_eq(peek(5), 100, "independent words: first word");
    check_eq(peek(6), 200, "independent words: second word");
  endtask

  // A spwr that arrives while a sprd waits for its read is taken at once (and parks operands that
  // the completion then fails); one that arrives after a successful compare waits until memory has
  // acknowledged the swap value.
  task automatic test_stall_after_success;
    int offered, accepted;
    poke(7, 0);
    spwr(0, 0, 1, 56);
    sprd(0);
    wait_for_mem_request(1'b0);
    offer(1'b1, 64'b0, {256'b0, 64'd1, 64'd56, 64'd5, 64'd0}, offered, accepted);
    check_eq(64'(accepted - offered), 0, "stall: a spwr during the read is not held");
    wait_for_mem_request(1'b1);
    offer(1'b1, 64'b0, {256'b0, 64'd2, 64'd56, 64'd6, 64'd1}, offered, accepted);
    check_eq(64'(accepted), 64'(last_wr_ack_cycle + 1),
             "stall: a spwr after the compare waits for the write acknowledgement");
    check(accepted - offered >= LATENCY, $sformatf(
          "stall: held %0d cycles, want at least the write latency %0d", accepted - offered,
          LATENCY));
    expect_answer(0, 0, 1'b1, MCAS_ERR_NONE, "stall: the CAS itself");
    sprd(1);
    expect_answer(1, 1, 1'b0, MCAS_ERR_NONE, "stall: the spwr parked during the read lost");
    sprd(2);
    expect_answer(2, 1, 1'b1, MCAS_ERR_NONE, "stall: the spwr parked after the write won");

    // Without a success there is nothing to stall for.
    spwr(0, 42, 43, 56);
    sprd(0);
    wait_for_mem_request(1'b0);
    @(negedge clk);
    while (mem_req_valid || !mem_rsp_valid) @(negedge clk);  // the deciding cycle
    @(negedge clk);
    offer(1'b1, 64'b0, {256'b0, 64'd1, 64'd48, 64'd0, 64'd0}, offered, accepted);
    check_eq(64'(accepted - offered), 0, "stall: none after a failed compare");
    expect_answer(0, 6, 1'b0, MCAS_ERR_NONE, "stall: the failed CAS");
    sprd(1);
    expect_answer(1, 200, 1'b0, MCAS_ERR_NONE, "stall: spwr for another word is independent");
  endtask

  task automatic test_out_of_range_ids;
    int dropped = n_dropped, mem_before;
    logic [63:0] n = 64'(NUM_REQUESTERS);
    poke(8, 30);
    spwr(1, 30, 31, 64);
    // Truncated to the index width, these ids would name register 1 (64 requesters) or a register
    // past the end of the array (5 requesters).
    spwr(n + 1, 999, 998, 64);
    spwr(64'h8000_0000_0000_0001, 999, 997, 64);
    spwr(n, 999, 996, 64);
    idle(2);
    check_eq(64'(n_dropped - dropped), 3, "out-of-range spwrs are dropped and reported");
    mem_before = n_mem_req;
    cas(n, 30, 31, 64, 0, 1'b0, MCAS_ERR_BAD_ID, "sprd with id NUM_REQUESTERS");
    sprd(n + 1);
    expect_answer(n + 1, 0, 1'b0, MCAS_ERR_BAD_ID, "sprd with id NUM_REQUESTERS + 1");
    sprd('1);
    expect_answer('1, 0, 1'b0, MCAS_ERR_BAD_ID, "sprd with id 2**64 - 1");
    sprd(64'h8000_0000_0000_0001);
    expect_answer(64'h8000_0000_0000_0001, 0, 1'b0, MCAS_ERR_BAD_ID, "sprd with id 2**63 + 1");
    check_eq(64'(n_mem_req - mem_before), 0, "out-of-range ids never reach memory");
    check_eq(64'(n_dropped - dropped), 4, "the spwr inside the rejected cas was dropped too");
    sprd(1);
    expect_answer(1, 30, 1'b1, MCAS_ERR_NONE, "requester 1's operands survived the bad ids");
    check_eq(peek(8), 31, "requester 1's swap value");
  endtask

  task automatic test_no_operands;
    poke(9, 3);
    sprd(2);
    expect_answer(2, 0, 1'b0, MCAS_ERR_NO_OPERANDS, "sprd without spwr");
    cas(2, 3, 4, 72, 3, 1'b1, MCAS_ERR_NONE, "cas after a lone sprd");
    sprd(2);
    expect_answer(2, 0, 1'b0, MCAS_ERR_NO_OPERANDS, "a sprd consumes its operands");
    check_eq(peek(9), 4, "the second sprd did not repeat the swap");
  endtask

  task automatic test_bad_targets;
    int mem_before = n_mem_req;
    poke(1, 77);
    cas(3, 77, 78, 12, 0, 1'b0, MCAS_ERR_BAD_TARGET, "misaligned target");
    cas(3, 0, 78, WORDS * 8, 0, 1'b0, MCAS_ERR_BAD_TARGET, "target one past the memory");
    cas(3, 77, 78, 64'h8000_0000_0000_0008, 0, 1'b0, MCAS_ERR_BAD_TARGET,
        "target whose low bits name word 1");
    check_eq(64'(n_mem_req - mem_before), 0, "bad targets never reach memory");
    check_eq(peek(1), 77, "bad targets leave memory alone");
    cas(3, 0, 78, (WORDS - 1) * 8, 0, 1'b1, MCAS_ERR_NONE, "last word is in range");
    check_eq(peek(WORDS - 1), 78, "last word written");
    // A size beyond what the word address can hold must not make targets alias low words.
    cfg_words = 64'd1 << (ADDR_W + 1);
    cas(3, 77, 79, (64'd1 << ADDR_W) * 8 + 8, 0, 1'b0, MCAS_ERR_BAD_TARGET,
        "target past the address width, with an oversized cfg_words");
    cfg_words = 64'(WORDS);
    check_eq(peek(1), 77, "no aliasing of word 1");
  endtask

  task automatic test_spwr_replaces_operands;
    poke(10, 50);
    spwr(4, 1, 2, 80);
    spwr(4, 50, 51, 80);
    sprd(4);
    expect_answer(4, 50, 1'b1, MCAS_ERR_NONE, "the second spwr's operands are used");
    check_eq(peek(10), 51, "second spwr's swap value");
  endtask

  // A held answer stays put, blocks the next sprd, and does not block spwrs.
  task automatic test_answer_backpressure;
    poke(11, 8);
    rsp_ready = 1'b0;
    spwr(0, 8, 9, 88);
    sprd(0);
    while (!rsp_valid) @(negedge clk);
    spwr(1, 9, 10, 88);
    req_valid = 1'b1;
    req_spwr = 1'b0;
    req_id = 1;
    idle(3);
    check(!req_ready, "backpressure: a sprd waits while the answer is held");
    check(rsp_valid && rsp_line[63:0] == 8 && rsp_line[64], "backpressure: the answer is stable");
    rsp_ready = 1'b1;
    while (!req_ready) @(negedge clk);
    @(negedge clk);
    req_valid = 1'b0;
    expect_answer(0, 8, 1'b1, MCAS_ERR_NONE, "backpressure: held answer");
    // Parked after the decision, so not failed by it.
    expect_answer(1, 9, 1'b1, MCAS_ERR_NONE, "backpressure: spwr parked during the held answer");
    check_eq(peek(11), 10, "backpressure: both swaps landed");
  endtask

  task automatic test_reset_forgets_operands;
    spwr(0, 1, 2, 0);
    rst = 1'b1;
    idle(2);
    rst = 1'b0;
    sprd(0);
    expect_answer(0, 0, 1'b0, MCAS_ERR_NO_OPERANDS, "reset forgets parked operands");
  endtask

  // Figure 6(b) as a waveform: spwr A, spwr B, sprd A (compare succeeds, then the stall while the
  // swap value is written), sprd B (fails by the conflict rule without touching memory).
  task automatic test_figure6;
    int offered, accepted;
    poke(0, 64'h40);
    spwr(0, 64'h40, 64'h41, 0);
    spwr(1, 64'h40, 64'h42, 0);
    sprd(0);
    offer(1'b0, 1, '0, offered, accepted);
    check(accepted - offered >= 2 * LATENCY, $sformatf(
          "figure 6: sprd B held %0d cycles, want at least A's read and write (%0d)",
          accepted - offered, 2 * LATENCY));
    expect_answer(0, 64'h40, 1'b1, MCAS_ERR_NONE, "figure 6: A succeeds");
    expect_answer(1, 64'h41, 1'b0, MCAS_ERR_NONE, "figure 6: B fails with A's value");
    idle(3);
  endtask

  // ---- Main --------------------------------------------------------------------------------------

  initial begin
    string scenario, vcd;
    req_valid = 1'b0;
    req_spwr = 1'b0;
    req_id = '0;
    req_line = '0;
    rsp_ready = 1'b1;
    rst = 1'b1;
    for (int w = 0; w < WORDS; w++) u_mem.words[w] = '0;
    repeat (2) @(negedge clk);
    rst = 1'b0;

    if (!$value$plusargs("scenario=%s", scenario)) scenario = "all";
    if (scenario == "fig6") begin
      if ($value$plusargs("vcd=%s", vcd)) begin
        $dumpfile(vcd);
        $dumpvars(1, tb_mcas);
      end
      test_figure6;
    end else if (scenario == "all") begin
      test_success;
      test_mismatch;
      test_conflict_after_success;
      test_conflict_after_failure;
      test_independent_words;
      test_stall_after_success;
      test_out_of_range_ids;
      test_no_operands;
      test_bad_targets;
      test_spwr_replaces_operands;
      test_answer_backpressure;
      test_reset_forgets_operands;
      test_figure6;
      check_eq(64'(n_taken), 64'(n_rsp), "no answer left unchecked");
    end else begin
      $fatal(1, "tb_mcas: unknown +scenario=%s (all, fig6)", scenario);
    end

    $display("tb_mcas: NUM_REQUESTERS=%0d LATENCY=%0d: %0d checks, %0d failed", NUM_REQUESTERS,
             LATENCY, checks, failures);
    if (failures != 0) $fatal(1, "tb_mcas: FAILED");
    $finish;
  end

  // A hung handshake must fail the run, not stall the script.
  initial begin
    #1ms;
    $fatal(1, "FAIL: tb_mcas: timeout");
  end

endmodule
