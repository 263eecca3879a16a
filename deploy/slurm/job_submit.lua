-- Atrium places every job on this cluster: its control plane (root)
-- submits and changes them. A tenant's workload reaches the controller
-- too (slurmd runs it as the tenant's user, and munge vouches for that
-- user), so without this a workload could sbatch work Atrium never placed
-- nor metered, on GPUs Atrium believes free, or scontrol update its own
-- job's limits. Job steps inside a job (srun) are not jobs and pass.
function slurm_job_submit(job_desc, part_list, submit_uid)
  if submit_uid == 0 then
    return slurm.SUCCESS
  end
  slurm.log_user("jobs on this cluster are submitted through Atrium (atrium job submit)")
  return slurm.ERROR
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  if modify_uid == 0 then
    return slurm.SUCCESS
  end
  slurm.log_user("jobs on this cluster are changed through Atrium")
  return slurm.ERROR
end

return slurm.SUCCESS
