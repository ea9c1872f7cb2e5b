(** * T3: per-response length normalisation (mechanism M3), THEORY.md section 3.

    GRPO's per-sequence mean gives [kappa_i = A_i / L_i], so a shared event gets
    [K = sum_i A_i / L_i]. *)

From Coq Require Import QArith Lqa Qfield Lia.
From Exchange Require Import Sums Cancellation.
Open Scope Q_scope.

Lemma Qdiv_1 : forall x : Q, x / 1 == x.
Proof. intro x. field. Qed.

(** Covariance form: [K = sum_i (r_i - mean r) (x_i - mean x)] with [x_i = 1/L_i]
    (any weights [x]); its sign is the sign of the within-group covariance of the
    rewards and [1/L]. *)
Theorem T3_covariance : forall G (r x : nat -> Q),
  K G (adv G 1 r) x == sum G (fun i => (r i - mean G r) * (x i - mean G x)).
Proof.
  intros G r x. unfold K, adv.
  rewrite (sum_ext G (fun i => (r i - mean G r) * (x i - mean G x))
                     (fun i => (r i - mean G r) * x i - mean G x * (r i - mean G r)))
    by (intros; ring).
  rewrite sum_minus, sum_scale, sum_centred.
  transitivity (sum G (fun i => (r i - mean G r) * x i)).
  - apply sum_ext. intros; field.
  - ring.
Qed.

(** With one correct response [c] (binary rewards [e_c], group-mean advantages),
    [K = 1/L_c - (1/G) sum_i 1/L_i]. *)
Theorem T3_one_correct : forall G (L : nat -> Q) (c : nat), (c < G)%nat ->
  K G (adv G 1 (ind c)) (fun i => / L i) == / L c - mean G (fun i => / L i).
Proof.
  intros G L c Hc. unfold K, adv.
  assert (Hm : mean G (ind c) == / QG G).
  { unfold mean. rewrite sum_ind_one by exact Hc. field. apply QG_nonzero; lia. }
  rewrite (sum_ext G (fun i => (ind c i - mean G (ind c)) / 1 * / L i)
                     (fun i => ind c i * / L i - mean G (ind c) * / L i))
    by (intros; rewrite Qdiv_1; ring).
  rewrite sum_minus, sum_ind, sum_scale, Hm by exact Hc.
  unfold mean, Qdiv. ring.
Qed.

(** Sign: [K > 0] exactly when [1/L_c] exceeds the mean of the [1/L_i]. *)
Theorem T3_sign : forall G (L : nat -> Q) (c : nat), (c < G)%nat ->
  (0 < K G (adv G 1 (ind c)) (fun i => / L i) <-> mean G (fun i => / L i) < / L c).
Proof.
  intros G L c Hc. rewrite T3_one_correct by exact Hc. split; intro H; lra.
Qed.

Lemma lt_inv_swap : forall a m : Q, 0 < a -> 0 < m -> (m < / a <-> a < / m).
Proof.
  intros a m Ha Hm.
  assert (Ea : / a * a == 1) by (field; lra).
  assert (Em : / m * m == 1) by (field; lra).
  rewrite <- (Qmult_lt_r m (/ a) a Ha), Ea.
  rewrite <- (Qmult_lt_r a (/ m) m Hm), Em.
  rewrite (Qmult_comm m a). reflexivity.
Qed.

Lemma mean_pos : forall G f, (0 < G)%nat ->
  (forall i, (i < G)%nat -> 0 < f i) -> 0 < mean G f.
Proof.
  intros G f HG Hf. unfold mean, Qdiv.
  apply Qmult_lt_0_compat.
  - apply sum_pos. + intros i Hi. pose proof (Hf i Hi). lra.
    + exists O. split; [exact HG | apply Hf; exact HG].
  - apply Qinv_lt_0_compat, QG_pos, HG.
Qed.

(** With positive lengths: [K > 0] exactly when [L_c] is below the harmonic mean of the
    lengths, [HM = 1 / mean_i (1/L_i)]: shared tokens are pushed up when the correct
    response is short, down when it is long, independently of their credit. *)
Theorem T3_harmonic_mean : forall G (L : nat -> Q) (c : nat),
  (c < G)%nat /\
  (forall i, (i < G)%nat -> 0 < L i) ->
  (0 < K G (adv G 1 (ind c)) (fun i => / L i) <-> L c < / mean G (fun i => / L i)).
Proof.
  uncurried.
  intros G L c Hc HL. rewrite T3_sign by exact Hc.
  apply lt_inv_swap.
  - apply HL, Hc.
  - apply mean_pos; [lia|]. intros i Hi. apply Qinv_lt_0_compat, HL, Hi.
Qed.
