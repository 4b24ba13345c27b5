// Pin wrapper for placing and routing mcas_unit on an iCE40 (script/fpga.sh synth).
//
// The unit's ports are about 1000 bits wide (a 512-bit request line, 64-bit ids, data and
// answers); an iCE40 package has at most a few hundred pins, and a device would drive those ports
// from its bus adapter, not from pins. So every input comes from one long shift register fed by a
// pin, and every output is captured into another that drains to a pin. All of the unit's logic
// stays observable (nothing is optimised away), and every path into and out of it starts and ends
// at a flip-flop, as it would next to a bus adapter. The two shift registers cost about one logic
// cell per bit; fpga/README.md reports the unit alone and the wrapped design apart.
module mcas_ice40_top #(
    parameter int NUM_REQUESTERS = 4,
    parameter int MEM_ADDR_W = 16
) (
    input  logic clk,
    input  logic rst,
    input  logic shift_in,   // next bit of the input register
    input  logic capture,    // 1: outputs into the output register; 0: shift it out
    output logic shift_out   // last bit of the output register
);
  // Only the 256 meaningful bits of the request line are driven; the padding is constant.
  localparam int IN_W = 64 + 1 + 1 + 64 + 256 + 1 + 1 + 1 + 64;
  localparam int OUT_W = 1 + 1 + 64 + 128 + 2 + 1 + 1 + 1 + MEM_ADDR_W + 64;

  logic [IN_W-1:0] in_q;
  logic [OUT_W-1:0] out_q;

  logic [63:0] cfg_words, req_id, mem_rsp_rdata, rsp_id, mem_req_wdata;
  logic [255:0] req_line_used;
  logic req_valid, req_spwr, rsp_ready, mem_req_ready, mem_rsp_valid;
  logic req_ready, rsp_valid, spwr_dropped, mem_req_valid, mem_req_write;
  logic [127:0] rsp_line;
  logic [1:0] rsp_error;
  logic [MEM_ADDR_W-1:0] mem_req_addr;

  assign {cfg_words, req_valid, req_spwr, req_id, req_line_used, rsp_ready, mem_req_ready,
          mem_rsp_valid, mem_rsp_rdata} = in_q;

  always_ff @(posedge clk) begin
    in_q <= {in_q[IN_W-2:0], shift_in};
    if (capture)
      out_q <= {req_ready, rsp_valid, rsp_id, rsp_line, rsp_error, spwr_dropped, mem_req_valid,
                mem_req_write, mem_req_addr, mem_req_wdata};
    else out_q <= {out_q[OUT_W-2:0], 1'b0};
  end
  assign shift_out = out_q[OUT_W-1];

  mcas_unit #(
      .NUM_REQUESTERS(NUM_REQUESTERS),
      .MEM_ADDR_W(MEM_ADDR_W)
  ) unit (
      .clk,
      .rst,
      .cfg_words,
      .req_valid,
      .req_ready,
      .req_spwr,
      .req_id,
      .req_line({256'b0, req_line_used}),
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
endmodule
