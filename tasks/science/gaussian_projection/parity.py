"""science/gaussian_projection's parity anchor: gsplat's fully_fused_projection forward (pinhole,
gsplat 1.5 semantics, per-axis radii) as a PyTorch composite over [C, N] (quaternion and scale to
covariance, world to camera, the EWA Jacobian with the frustum clamp, the blur, the inverse, the
radii and the culling), writing radii, means2d, depths and conics.

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def gaussian_projection(torch, t, s, sym):
    means, quats, scales = t["means"], t["quats"], t["scales"]  # [N, 3], [N, 4], [N, 3]
    viewmats, Ks = t["viewmats"], t["Ks"]  # [C, 4, 4], [C, 3, 3]
    width, height = float(s["width"]), float(s["height"])
    eps2d, near, far = s["eps2d"], s["near_plane"], s["far_plane"]

    # Covariance from the quaternion (wxyz, normalised here) and the scales: R S S^T R^T.
    q = quats / quats.norm(dim=-1, keepdim=True)
    w, x, y, z = q.unbind(-1)
    rot = torch.stack([
        1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y),
        2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x),
        2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y),
    ], dim=-1).reshape(-1, 3, 3)
    m = rot * scales[:, None, :]  # R S
    covar = m @ m.transpose(1, 2)  # [N, 3, 3]

    # World to camera, per camera: [C, N, 3] and [C, N, 3, 3].
    rot_c = viewmats[:, :3, :3]
    mean_c = torch.einsum("cij,nj->cni", rot_c, means) + viewmats[:, None, :3, 3]
    covar_c = torch.einsum("cij,njk,clk->cnil", rot_c, covar, rot_c)

    fx, fy = Ks[:, 0, 0][:, None], Ks[:, 1, 1][:, None]
    cx, cy = Ks[:, 0, 2][:, None], Ks[:, 1, 2][:, None]
    mx, my, mz = mean_c.unbind(-1)
    rz = 1.0 / mz
    tan_fovx, tan_fovy = 0.5 * width / fx, 0.5 * height / fy
    lim_x_pos = (width - cx) / fx + 0.3 * tan_fovx
    lim_x_neg = cx / fx + 0.3 * tan_fovx
    lim_y_pos = (height - cy) / fy + 0.3 * tan_fovy
    lim_y_neg = cy / fy + 0.3 * tan_fovy
    tx = mz * torch.minimum(lim_x_pos, torch.maximum(-lim_x_neg, mx * rz))
    ty = mz * torch.minimum(lim_y_pos, torch.maximum(-lim_y_neg, my * rz))
    zero = torch.zeros_like(mz)
    jac = torch.stack([fx * rz, zero, -fx * tx * rz * rz,
                       zero, fy * rz, -fy * ty * rz * rz], dim=-1).reshape(*mz.shape, 2, 3)
    cov2d = jac @ covar_c @ jac.transpose(-1, -2)  # [C, N, 2, 2]
    a = cov2d[..., 0, 0] + eps2d
    b = cov2d[..., 0, 1]
    c = cov2d[..., 1, 1] + eps2d
    det = a * c - b * b
    inv_det = 1.0 / det
    u = fx * mx * rz + cx
    v = fy * my * rz + cy
    radius_x = torch.ceil(3.33 * torch.sqrt(a))
    radius_y = torch.ceil(3.33 * torch.sqrt(c))
    keep = (mz >= near) & (mz <= far) & (det > 0)
    keep &= ~((u + radius_x <= 0) | (u - radius_x >= width) | (v + radius_y <= 0) |
              (v - radius_y >= height))
    keep2 = keep[..., None]
    t["radii"].copy_(torch.where(keep2, torch.stack([radius_x, radius_y], -1), 0.0))
    t["means2d"].copy_(torch.where(keep2, torch.stack([u, v], -1), 0.0))
    t["depths"].copy_(torch.where(keep, mz, 0.0))
    t["conics"].copy_(torch.where(keep2, torch.stack([c * inv_det, -b * inv_det, a * inv_det], -1),
                                  0.0))
