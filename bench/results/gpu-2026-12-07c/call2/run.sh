#!/bin/bash
# Prepared call 2, on the machine of call 1: stages the first half
# of the CODA reference's wheels (bench/fused/fetch_coda_ref.sh) for
# call 3. Carries .whl/coda1.
bash bench/fused/run_device.sh stage
